// Package history is the observer's syscall, object and process history
// recorder for one managed execution.
//
// Start loads eBPF programs scoped to a session cgroup (v2): every task whose
// cgroup is that cgroup or below it, and nothing else, is recorded. The
// record is the process history (fork with the parent, exec with the file
// name, exit with the status) and every syscall that changes a system object
// (files, mounts, BPF, kernel modules, host and domain name, sysctl writes,
// sockets, signals, ptrace, namespaces, root changes, reboot, swap, clocks),
// with the arguments that name the object and the return value. Events are
// written as canonical JSON lines; Decoder reads them back for verifiers.
// The byte strings the kernel hands over (comm, the executed file name, the
// string arguments, a working directory) are jsonbytes.String: a JSON
// string when valid UTF-8, else {"base64":"…"}, so that no two differ only
// on paper. The history's format is the evidence set's (evidence.Format).
//
// Records the kernel could not hand over (a full ring buffer) are counted
// per CPU; a history with drops is INCOMPLETE and says so in its last line.
// The recorder must not be loaded together with the eBPF process-tree
// provider (internal/proctree): both hook process lifecycle tracepoints.
//
// How it works: BTF-typed tracepoints only (tp_btf sched_process_fork,
// exec and exit, raw_syscalls sys_enter and sys_exit, and a task
// iterator for the processes already present), so the guest kernel needs
// CONFIG_DEBUG_INFO_BTF, CONFIG_BPF_EVENTS and syscall tracepoints and no
// kprobes. sys_enter keeps a recorded syscall's arguments per thread;
// sys_exit adds the return value and reads the string arguments, after the
// kernel has faulted them in.
//
// Limits: paths are recorded as the task passed them, relative to their
// directory descriptor or working directory, which are not resolved (the
// history has the chdir and fchdir calls, and the working directory of the
// processes present at Start, to resolve them from); a
// string is read after the syscall, so another thread may have changed it
// (the kernel used the earlier value); netlink messages (routes, firewall)
// are not decoded, only the sockets and their options; the scope is found
// by the cgroup's depth below the cgroup2 mount, which must be the
// hierarchy's root (no cgroup namespace); amd64 only.
//
// Cost: hooking raw_syscalls puts every syscall on the machine on the
// tracing path, recorded or not (about 70-190 ns more per syscall measured
// on a loaded 2-core host). A recorded syscall costs a few microseconds
// more, most of it the reader's decoding and encoding (about 3-4 us of CPU
// per event). See BenchmarkOverhead.
package history

import (
	"errors"
	"time"

	"github.com/allox-os/allox/services/internal/effects/jsonbytes"
)

// Event kinds.
const (
	// KindPresent is a process already in the cgroup when Start attached:
	// the first lines of a history, by TGID.
	KindPresent = "present"
	KindFork    = "fork"
	KindExec    = "exec"
	KindExit    = "exit"
	KindSyscall = "syscall"
	// KindEnd is the last line of a history: Dropped and Incomplete.
	KindEnd = "end"
)

// Errors returned by Start.
var (
	// ErrNotCgroup2 means the scope path is not a directory of a cgroup v2 mount.
	ErrNotCgroup2 = errors.New("not a cgroup v2 directory")
	// ErrNoBTF means the kernel exposes no BTF (/sys/kernel/btf/vmlinux):
	// it needs CONFIG_DEBUG_INFO_BTF=y.
	ErrNoBTF = errors.New("kernel has no BTF: build it with CONFIG_DEBUG_INFO_BTF=y")
	// ErrUnsupportedArch means there is no syscall table for this architecture.
	ErrUnsupportedArch = errors.New("history recorder supports amd64 only")
	// ErrStopped is returned by a second Stop.
	ErrStopped = errors.New("recorder already stopped")
)

// Event is one line of a history. Fields that do not apply to its Kind are
// omitted from the JSON.
type Event struct {
	// Seq numbers the lines from 0 in the order the recorder read them.
	Seq uint64 `json:"seq"`
	// Kind is KindPresent, KindFork, KindExec, KindExit, KindSyscall or KindEnd.
	Kind string `json:"kind"`
	// TimeNS is CLOCK_MONOTONIC in nanoseconds: when the syscall was
	// entered, or when the process event happened.
	TimeNS uint64 `json:"time_ns,omitempty"`
	// PID is the thread id, TGID the process id, PPID the parent process id
	// (of the child, for a fork). StartTime (ns since boot) together with
	// TGID identifies the process: pids are reused.
	PID       int              `json:"pid,omitempty"`
	TGID      int              `json:"tgid,omitempty"`
	PPID      int              `json:"ppid,omitempty"`
	StartTime uint64           `json:"start_time,omitempty"`
	Comm      jsonbytes.String `json:"comm,omitempty"`
	// CgroupID is the cgroup v2 id (the directory's inode number) of the
	// task that caused the event.
	CgroupID uint64 `json:"cgroup_id,omitempty"`

	// ParentStartTime is the parent's StartTime, for a fork.
	ParentStartTime uint64 `json:"parent_start_time,omitempty"`
	// Filename is the executed file, for an exec.
	Filename jsonbytes.String `json:"filename,omitempty"`
	// ExitStatus is the exit status, or Signal the terminating signal, for an exit.
	ExitStatus *int `json:"exit_status,omitempty"`
	Signal     int  `json:"signal,omitempty"`

	// Syscall is the syscall name and Nr its number on this architecture.
	Syscall string `json:"syscall,omitempty"`
	Nr      int    `json:"nr,omitempty"`
	// Args holds the integer arguments by name; Strings the string
	// arguments (paths, names) read from user memory after the syscall,
	// or the working directory ("cwd") of a present process.
	// A string argument that could not be read is absent from Strings and
	// listed in Unreadable; one cut at 255 bytes is listed in Truncated.
	Args       map[string]int64            `json:"args,omitempty"`
	Strings    map[string]jsonbytes.String `json:"strings,omitempty"`
	Truncated  []string                    `json:"truncated,omitempty"`
	Unreadable []string                    `json:"unreadable,omitempty"`
	// Ret is the return value, and Errno its name when it is an error.
	// It is absent when the syscall did not return: NoReturn (the thread
	// exited in it) or Unfinished (it was still running at Stop).
	Ret        *int64 `json:"ret,omitempty"`
	Errno      string `json:"errno,omitempty"`
	NoReturn   bool   `json:"noreturn,omitempty"`
	Unfinished bool   `json:"unfinished,omitempty"`

	// Dropped counts the records lost in the kernel, for KindEnd;
	// Incomplete is true when any were, or when writing the history failed.
	Dropped    uint64 `json:"dropped,omitempty"`
	Incomplete bool   `json:"incomplete,omitempty"`
}

// Summary describes a finished recording.
type Summary struct {
	Start, Stop time.Time
	// Events counts the lines written, the end line excluded.
	Events uint64
	// Syscalls counts syscall events by syscall name.
	Syscalls map[string]int
	// Present, Forks, Execs and Exits count the process events.
	Present, Forks, Execs, Exits int
	// Processes counts the distinct processes (TGID and StartTime) seen.
	Processes int
	// Unfinished counts the syscalls still running at Stop.
	Unfinished int
	// Dropped counts the records lost in the kernel; Incomplete is true
	// when any were, or when writing the history failed.
	Dropped    uint64
	Incomplete bool
}
