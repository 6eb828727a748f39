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

	"github.com/allox-os/allox/services/internal/tracker"
)

// Kind is the kind of a process event: the type belongs to the tracker that consumes the events
// (see [tracker.EventKind]).
type Kind = tracker.EventKind

// Event kinds, equal to the values used by the BPF program.
const (
	Fork = tracker.Fork
	Exec = tracker.Exec
	Exit = tracker.Exit
)

// Event is one fork, exec or exit of an attributed process; see [tracker.ProcessEvent].
type Event = tracker.ProcessEvent

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
