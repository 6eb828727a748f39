package tracker

import "syscall"

// EventKind is the kind of a process event.
type EventKind uint32

// Event kinds, equal to the values used by the BPF program.
const (
	Fork EventKind = 1
	Exec EventKind = 2
	Exit EventKind = 3
)

func (k EventKind) String() string {
	switch k {
	case Fork:
		return "fork"
	case Exec:
		return "exec"
	case Exit:
		return "exit"
	}
	return "unknown"
}

// ProcessEvent is one fork, exec or exit of a process attributed to a run, as a provider (the
// eBPF process-tree collector) reports it to the tracker; Event is what the tracker records of it.
//
// A process is identified by TGID and StartTime: pids are reused, the pair
// is not. StartTime is the kernel's task start_time (CLOCK_MONOTONIC
// nanoseconds), exactly as the collector's Register and the BPF side use it.
type ProcessEvent struct {
	Kind            EventKind
	RunID           uint64
	PID             int    // thread id of the task that triggered the event
	TGID            int    // process id
	PPID            int    // process id of the real parent at event time
	StartTime       uint64 // start_time of the process (its thread-group leader)
	ParentStartTime uint64
	CgroupID        uint64 // cgroup v2 id read when the event happened
	Comm            string
	Filename        string             // Exec only: the path passed to execve
	Status          syscall.WaitStatus // Exit only: the wait status
	Root            bool               // the process registered as the run's root
}

// ExitCode returns the exit code of an Exit event, or -1 if the process was
// killed by a signal.
func (e ProcessEvent) ExitCode() int {
	return e.Status.ExitStatus()
}
