// Package proctree is the eBPF process-tree collector: it attributes
// processes to agent runs on the kernel's sched tracepoints and reports the
// fork, exec and exit of every attributed process.
//
// A run is registered with [Collector.Register] by the pid of its first
// process before that process is released; every descendant inherits the
// run in the kernel at fork, including double-forked, setsid and daemonized
// processes. Processes that were never attributed are not reported.
package proctree

import (
	"errors"
	"syscall"
)

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
// nanoseconds), exactly as [Collector.Register] and the BPF side use it.
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

// Sentinel errors.
var (
	// ErrNoBTF means the kernel exposes no BTF, which the BTF-typed
	// tracepoints and CO-RE relocations need.
	ErrNoBTF = errors.New("kernel BTF not available: the kernel needs CONFIG_DEBUG_INFO_BTF=y")
	// ErrNoProcess means the pid given to Register does not exist.
	ErrNoProcess = errors.New("no such process")
	// ErrRegistered means the process is already attributed to a run.
	ErrRegistered = errors.New("process already attributed to a run")
	// ErrClosed means the collector was closed.
	ErrClosed = errors.New("collector closed")
)
