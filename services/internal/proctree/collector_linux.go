package proctree

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

const (
	defaultBTFPath = "/sys/kernel/btf/vmlinux"
	// wakeupBatch is how many events a CPU submits before it wakes the reader.
	wakeupBatch = 64
	// pollInterval bounds how long an event submitted without a wake-up waits.
	pollInterval = 50 * time.Millisecond
	eventBuffer  = 4096
)

// BPF counter indices, equal to enum counter in bpf/proctree.bpf.c.
const (
	counterRingbufFull = 0
	counterAttrFull    = 1
)

// Collector owns the loaded BPF objects and the ring-buffer reader.
type Collector struct {
	objs   proctreeObjects
	links  []link.Link
	iter   *link.Iter
	reader *ringbuf.Reader
	events chan Event
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex // serialises Register
	once   sync.Once
}

// Open loads the BPF programs, attaches them to the sched_process_fork,
// sched_process_exec and sched_process_exit tracepoints and starts reading
// events. It then scans the running tasks once through the BPF task
// iterator, so a kernel that cannot report existing processes fails here.
func Open() (*Collector, error) {
	return open(defaultBTFPath)
}

func open(btfPath string) (*Collector, error) {
	if _, err := os.Stat(btfPath); err != nil {
		return nil, fmt.Errorf("%s: %w", btfPath, ErrNoBTF)
	}
	spec, err := loadProctree()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[proctreeVarWakeupBatch].Set(uint32(wakeupBatch)); err != nil {
		return nil, fmt.Errorf("set wakeup_batch: %w", err)
	}
	c := &Collector{events: make(chan Event, eventBuffer), done: make(chan struct{})}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("load proctree: %w", err)
	}
	if err := c.attach(); err != nil {
		c.closeKernel()
		return nil, err
	}
	if _, err := c.tasks(); err != nil {
		c.closeKernel()
		return nil, fmt.Errorf("seed running processes: %w", err)
	}
	c.wg.Add(1)
	go c.read()
	return c, nil
}

func (c *Collector) attach() error {
	for _, p := range []*ebpf.Program{c.objs.HandleFork, c.objs.HandleExec, c.objs.HandleExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach %s: %w", p, err)
		}
		c.links = append(c.links, l)
	}
	it, err := link.AttachIter(link.IterOptions{Program: c.objs.DumpTasks})
	if err != nil {
		return fmt.Errorf("attach task iterator: %w", err)
	}
	c.iter = it
	r, err := ringbuf.NewReader(c.objs.Events)
	if err != nil {
		return fmt.Errorf("ring buffer reader: %w", err)
	}
	c.reader = r
	return nil
}

// Events returns the channel of events. It is closed by Close. The reader
// blocks while the channel is full; the ring buffer then fills and the
// kernel counts drops, so consume it promptly.
func (c *Collector) Events() <-chan Event {
	return c.events
}

// Drops returns the number of events lost since Open: records that did not
// fit in the ring buffer, and children whose attribution did not fit in the
// attribution map.
func (c *Collector) Drops() (uint64, error) {
	var total uint64
	for _, idx := range []uint32{counterRingbufFull, counterAttrFull} {
		var perCPU []uint64
		if err := c.objs.Counters.Lookup(idx, &perCPU); err != nil {
			return 0, fmt.Errorf("read drop counter: %w", err)
		}
		for _, v := range perCPU {
			total += v
		}
	}
	return total, nil
}

// Close detaches the programs, stops the reader and closes Events.
func (c *Collector) Close() error {
	var err error
	c.once.Do(func() {
		c.mu.Lock() // wait for a Register in progress
		close(c.done)
		c.mu.Unlock()
		err = c.reader.Close()
		c.wg.Wait()
		c.reader = nil
		close(c.events)
		err = errors.Join(err, c.closeKernel())
	})
	return err
}

func (c *Collector) closeKernel() error {
	var errs []error
	for _, l := range c.links {
		errs = append(errs, l.Close())
	}
	if c.iter != nil {
		errs = append(errs, c.iter.Close())
	}
	if c.reader != nil {
		errs = append(errs, c.reader.Close())
	}
	errs = append(errs, c.objs.Close())
	return errors.Join(errs...)
}
