// Package event holds the process events of the eBPF process-tree provider: plain data with no
// dependency on the BPF loader, so a consumer (the daemon's process tracker) can be written and
// built without linking cilium/ebpf.
package event

import "syscall"

// Kind is the kind of a process event.
type Kind uint32

// Event kinds, equal to the values used by the BPF program.
const (
	Fork Kind = 1
	Exec Kind = 2
	Exit Kind = 3
)

func (k Kind) String() string {
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

// Event is one fork, exec or exit of an attributed process.
//
// A process is identified by TGID and StartTime: pids are reused, the pair
// is not. StartTime is the kernel's task start_time (CLOCK_MONOTONIC
// nanoseconds), exactly as the collector's Register and the BPF side use it.
type Event struct {
	Kind            Kind
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
func (e Event) ExitCode() int {
	return e.Status.ExitStatus()
}
