package proctree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
)

// task is one running process as the BPF task iterator sees it.
type task struct {
	ppid      int
	startTime uint64
}

// Register attributes the process pid, and every process already descended
// from it, to runID. Call it before the process is released (for example
// while it waits on a pipe): everything it forks afterwards inherits the
// run in the kernel. pid is a pid of the initial pid namespace. Register
// returns ErrNoProcess if pid is not a live process (zombies included) and
// ErrRegistered if it is already attributed.
//
// Entries are inserted first and the task list is scanned afterwards: a
// child forked concurrently is seen either by the kernel's fork hook or by
// the next scan, and an entry whose process exited before its insert (so
// the kernel's exit hook could not remove it) is found by the final scan
// and removed.
func (c *Collector) Register(runID uint64, pid int) error {
	if runID == 0 {
		return fmt.Errorf("register pid %d: run id must be non-zero", pid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	if err := c.register(runID, pid); err != nil {
		return fmt.Errorf("register pid %d: %w", pid, err)
	}
	return nil
}

func (c *Collector) register(runID uint64, pid int) error {
	tasks, err := c.tasks()
	if err != nil {
		return err
	}
	root, ok := tasks[pid]
	if !ok {
		return ErrNoProcess
	}
	if err := c.insert(pid, root.startTime, runID, true); err != nil {
		if errors.Is(err, ebpf.ErrKeyExist) {
			return ErrRegistered
		}
		return err
	}
	inserted := map[int]uint64{pid: root.startTime}
	if tasks, err = c.tasks(); err != nil {
		return err
	}
	for _, d := range descendants(tasks, pid, root.startTime) {
		err := c.insert(d, tasks[d].startTime, runID, false)
		if errors.Is(err, ebpf.ErrKeyExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("descendant %d: %w", d, err)
		}
		inserted[d] = tasks[d].startTime
	}
	if tasks, err = c.tasks(); err != nil {
		return err
	}
	for p, start := range inserted {
		if t, ok := tasks[p]; ok && t.startTime == start {
			continue
		}
		k := proctreeKey{Tgid: uint32(p), StartTime: start}
		if err := c.objs.Attrs.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("remove exited %d: %w", p, err)
		}
		if p == pid {
			return ErrNoProcess
		}
	}
	return nil
}

func (c *Collector) insert(pid int, startTime, runID uint64, root bool) error {
	k := proctreeKey{Tgid: uint32(pid), StartTime: startTime}
	v := proctreeAttr{RunId: runID}
	if root {
		v.Root = 1
	}
	return c.objs.Attrs.Update(&k, &v, ebpf.UpdateNoExist)
}

// descendants returns the pids below root in the tree, root excluded. The
// root must still have its start time, so a reused pid is not followed.
func descendants(tasks map[int]task, root int, rootStart uint64) []int {
	if t, ok := tasks[root]; !ok || t.startTime != rootStart {
		return nil
	}
	children := map[int][]int{}
	for pid, t := range tasks {
		children[t.ppid] = append(children[t.ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, ch := range children[p] {
			if ch == p {
				continue
			}
			out = append(out, ch)
			queue = append(queue, ch)
		}
	}
	return out
}

// tasks lists every running process (thread-group leader) with its exact
// kernel start time, through the BPF task iterator.
func (c *Collector) tasks() (map[int]task, error) {
	rd, err := c.iter.Open()
	if err != nil {
		return nil, fmt.Errorf("task iterator: %w", err)
	}
	defer rd.Close()
	raw, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("task iterator: %w", err)
	}
	return parseTasks(raw)
}

func parseTasks(raw []byte) (map[int]task, error) {
	var rec proctreeTaskRec
	size := binary.Size(rec)
	if len(raw)%size != 0 {
		return nil, fmt.Errorf("BUG: task iterator returned %d bytes, not a multiple of %d", len(raw), size)
	}
	out := make(map[int]task, len(raw)/size)
	r := bytes.NewReader(raw)
	for r.Len() > 0 {
		if err := binary.Read(r, binary.NativeEndian, &rec); err != nil {
			return nil, err
		}
		out[int(rec.Tgid)] = task{ppid: int(rec.Ppid), startTime: rec.StartTime}
	}
	if len(out) == 0 {
		return nil, errors.New("task iterator returned no processes")
	}
	return out, nil
}
