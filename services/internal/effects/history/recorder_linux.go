package history

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/allox-os/allox/services/internal/effects/jsonbytes"
)

const (
	btfPath = "/sys/kernel/btf/vmlinux"
	// wakeupBatch is how many records a CPU submits before it wakes the reader.
	wakeupBatch = 64
	// pollInterval bounds how long a record submitted without a wake-up waits.
	pollInterval = 50 * time.Millisecond
	// settle is how long Stop waits after detaching for program runs that
	// started before the detach to submit their records, unless the scope's
	// cgroup is empty (see Stop).
	settle = 20 * time.Millisecond
)

// BPF counter indices, equal to enum counter in bpf/history.bpf.c.
const (
	counterRingbufFull = 0
	counterPendingFull = 1
)

// Recorder records the history of one session cgroup. Its methods are
// safe for use by one goroutine at a time.
type Recorder struct {
	cgroup string // the scope's cgroup directory
	objs   historyObjects
	links  []link.Link // in detach order
	reader *ringbuf.Reader
	table  map[uint32]*syscallSpec
	out    *bufio.Writer

	stopping chan struct{} // closed by Stop once the programs are detached
	done     chan struct{} // closed by the reader goroutine
	stopped  bool

	// Owned by the reader goroutine until done, then by Stop.
	sum   Summary
	procs map[procKey]struct{}
	seq   uint64
	werr  error
	line  []byte // reused encoding buffer
	// undecodable counts records that were not an event the table knows.
	undecodable uint64
}

type procKey struct {
	tgid  int
	start uint64
}

// Start loads and attaches the recorder for the cgroup v2 directory
// cgroupPath, and writes its history to out as JSON lines until Stop.
// Only tasks in that cgroup or below it are recorded, from the moment
// Start returns. out is written by one goroutine of the recorder only.
func Start(cgroupPath string, out io.Writer) (*Recorder, error) {
	return start(cgroupPath, out, 0)
}

// start is Start with a ring buffer of ringSize bytes (a power of two
// multiple of the page size), or the default of bpf/history.bpf.c if 0.
func start(cgroupPath string, out io.Writer, ringSize uint32) (*Recorder, error) {
	if len(syscalls) == 0 {
		return nil, ErrUnsupportedArch
	}
	if out == nil {
		return nil, errors.New("history: nil writer: pass io.Discard to record nothing")
	}
	if _, err := os.Stat(btfPath); err != nil {
		return nil, fmt.Errorf("%s: %w", btfPath, ErrNoBTF)
	}
	sc, err := resolveScope(cgroupPath)
	if err != nil {
		return nil, err
	}
	table, err := tableByNr()
	if err != nil {
		return nil, err
	}
	spec, err := loadHistory()
	if err != nil {
		return nil, err
	}
	for name, v := range map[string]any{
		historyVarScopeId:     sc.id,
		historyVarScopeLevel:  sc.level,
		historyVarWakeupBatch: uint32(wakeupBatch),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	if ringSize != 0 {
		spec.Maps[historyMapEvents].MaxEntries = ringSize
	}
	r := &Recorder{
		cgroup:   cgroupPath,
		table:    table,
		out:      bufio.NewWriterSize(out, 64<<10),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
		procs:    make(map[procKey]struct{}),
	}
	if err := spec.LoadAndAssign(&r.objs, &ebpf.CollectionOptions{Cache: btfCache()}); err != nil {
		return nil, fmt.Errorf("load history programs: %w", err)
	}
	if err := r.setup(); err != nil {
		r.closeKernel()
		return nil, err
	}
	r.sum = Summary{Start: time.Now(), Syscalls: map[string]int{}}
	if err := r.present(); err != nil {
		r.closeKernel()
		return nil, err
	}
	go r.read()
	return r, nil
}

// present writes the processes already in scope, found by the BPF task
// iterator after the programs were attached, so none is missed: one that
// forks meanwhile is both present and forked.
func (r *Recorder) present() error {
	it, err := link.AttachIter(link.IterOptions{Program: r.objs.DumpTasks})
	if err != nil {
		return fmt.Errorf("attach task iterator: %w", err)
	}
	defer it.Close()
	rd, err := it.Open()
	if err != nil {
		return fmt.Errorf("open task iterator: %w", err)
	}
	defer rd.Close()
	var recs []historyTaskRec
	for {
		var rec historyTaskRec
		if err := binary.Read(rd, binary.NativeEndian, &rec); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("read task iterator: %w", err)
		}
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, func(a, b historyTaskRec) int { return cmp.Compare(a.Tgid, b.Tgid) })
	for _, rec := range recs {
		r.sum.Present++
		ev := Event{
			Kind: KindPresent, PID: int(rec.Tgid), TGID: int(rec.Tgid), PPID: int(rec.Ppid),
			StartTime: rec.StartTime, Comm: cstring(rec.Comm[:]), CgroupID: rec.CgroupId,
		}
		// The working directory, to resolve its relative paths; later
		// changes are chdir events. Gone if the process exited meanwhile.
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", rec.Tgid)); err == nil {
			ev.Strings = map[string]jsonbytes.String{"cwd": jsonbytes.String(cwd)}
		}
		r.account(&ev)
	}
	return nil
}

func (r *Recorder) setup() error {
	for nr, s := range r.table {
		d, err := s.desc()
		if err != nil {
			return err
		}
		if err := r.objs.Descs.Put(nr, d); err != nil {
			return fmt.Errorf("syscall table %s: %w", s.name, err)
		}
	}
	rd, err := ringbuf.NewReader(r.objs.Events)
	if err != nil {
		return fmt.Errorf("ring buffer reader: %w", err)
	}
	r.reader = rd
	// Detach order: no new syscall is entered or process forked before
	// the running syscalls return and the exits are seen.
	for _, p := range []*ebpf.Program{
		r.objs.SysEnter, r.objs.HandleFork, r.objs.HandleExec, r.objs.SysExit, r.objs.HandleExit,
	} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach %s: %w", p, err)
		}
		r.links = append(r.links, l)
	}
	return nil
}

// Stop detaches the programs, drains the ring buffer completely, writes
// the syscalls still running as unfinished and the end line, and returns
// the summary. The error reports a failure to detach or to write the
// history; the summary is valid either way.
func (r *Recorder) Stop() (Summary, error) {
	if r.stopped {
		return Summary{}, ErrStopped
	}
	r.stopped = true
	// Detaching a tracing program waits for an RCU grace period: close the links in parallel, so
	// that Stop waits for about one instead of one per program.
	errs := make([]error, len(r.links))
	var wg sync.WaitGroup
	for i, l := range r.links {
		wg.Go(func() { errs[i] = l.Close() })
	}
	wg.Wait()
	r.links = nil
	// A program run that began before the detach may still be submitting its record. None can be
	// for the scope once its cgroup is empty: a task leaves its cgroup (cgroup_exit) after its
	// last traced event (sched_process_exit), and each record is submitted within its run. The
	// observer stops the recorder at B on an empty, frozen cgroup, so B does not pay the wait.
	if r.populated() {
		time.Sleep(settle)
	}
	close(r.stopping)
	// Wake the reader now instead of at its next poll: it returns every record still in the ring,
	// then ErrFlushed, and ends.
	if err := r.reader.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("flush the ring buffer reader: %w", err))
	}
	<-r.done

	r.unfinished()
	dropped, err := r.dropped()
	errs = append(errs, err)
	dropped += r.undecodable
	r.sum.Dropped = dropped
	r.sum.Incomplete = dropped > 0 || r.werr != nil || err != nil
	r.sum.Stop = time.Now()
	end := Event{Seq: r.seq, Kind: KindEnd, Dropped: dropped, Incomplete: r.sum.Incomplete}
	r.write(&end)
	if r.werr == nil {
		r.werr = r.out.Flush()
	}
	if r.werr != nil {
		r.sum.Incomplete = true
		r.werr = fmt.Errorf("record history: %w", r.werr)
	}
	errs = append(errs, r.werr, r.closeKernel())
	return r.sum, errors.Join(errs...)
}

// populated reports whether the scope's cgroup may still hold a task: true unless its
// cgroup.events says "populated 0".
func (r *Recorder) populated() bool {
	b, err := os.ReadFile(filepath.Join(r.cgroup, "cgroup.events"))
	if err != nil {
		return true
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "populated 0" {
			return false
		}
	}
	return true
}

// unfinished writes the syscalls entered before Stop that had not returned.
func (r *Recorder) unfinished() {
	var (
		tid uint32
		p   historyPending
	)
	it := r.objs.Inflight.Iterate()
	for it.Next(&tid, &p) {
		ev, ok := r.pendingEvent(tid, &p)
		if !ok {
			continue
		}
		r.sum.Unfinished++
		r.account(&ev)
	}
	if err := it.Err(); err != nil && r.werr == nil {
		r.werr = fmt.Errorf("read unfinished syscalls: %w", err)
	}
}

// dropped sums the per-CPU drop counters.
func (r *Recorder) dropped() (uint64, error) {
	var total uint64
	for _, idx := range []uint32{counterRingbufFull, counterPendingFull} {
		var perCPU []uint64
		if err := r.objs.Counters.Lookup(idx, &perCPU); err != nil {
			return 0, fmt.Errorf("read drop counter: %w", err)
		}
		for _, v := range perCPU {
			total += v
		}
	}
	return total, nil
}

func (r *Recorder) closeKernel() error {
	var errs []error
	for _, l := range r.links {
		errs = append(errs, l.Close())
	}
	if r.reader != nil {
		errs = append(errs, r.reader.Close())
	}
	errs = append(errs, r.objs.Close())
	return errors.Join(errs...)
}
