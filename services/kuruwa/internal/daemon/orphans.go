package daemon

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"time"

	instd "github.com/allox-os/allox/services/kuruwa/internal/instance"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"github.com/prometheus/procfs"
)

// An instance daemon is its terminals' parent, and it ends them when it shuts down. When it
// dies instead — killed, crashed, or killed by one of its own terminals — or hangs and is
// killed, its terminals' programs are orphaned: each leads a session of its own, outside the
// instance's process group, and one that ignores SIGHUP (anything under nohup does) keeps
// running, unsupervised, behind an instance that reports it gone. So this daemon keeps, for
// every terminal it can see in its own pid namespace, the identity of the program's process
// (pid and start time) until the instance daemon says it exited, and once the instance daemon
// is gone it kills what is left of each such program's process group — the same groups the
// instance daemon itself would have ended, and nothing else. A terminal in an instance with a
// pid namespace of its own needs none of this: that namespace ends with its init.

// orphanWait bounds how long an instance's end waits for killed programs to be gone.
const orphanWait = time.Second

// procIdentity is a process as this daemon saw it: a pid that is reused names another process,
// which has another start time.
type procIdentity struct {
	pid   int
	start uint64 // /proc/PID/stat starttime, clock ticks since boot
}

// instanceDaemonPID returns the pid, in this daemon's pid namespace, of the instance daemon
// that answered hello h for the init cmdPID, or 0 when its terminals' pids mean nothing here:
// it reported another pid namespace, or its pid is not cmdPID or a descendant of it.
func instanceDaemonPID(cmdPID int, h wire.Hello) int {
	if h.PIDNamespace == 0 || h.PIDNamespace != instd.PIDNamespace() {
		return 0
	}
	for pid, depth := h.PID, 0; pid > 1 && depth < 16; depth++ {
		if pid == cmdPID {
			return h.PID
		}
		st, ok := stat(pid)
		if !ok {
			return 0
		}
		pid = st.PPID
	}
	return 0
}

// terminalIdentity returns the identity of the process pid if it is a terminal's program as
// the instance daemon parent started it: its child and the leader of a session of its own.
// Anything else — a pid the instance daemon reported wrongly, or a program that already exited
// and whose pid was reused — is not recorded, so it can never be killed.
func terminalIdentity(parent, pid int) (procIdentity, bool) {
	if parent <= 0 || pid <= 0 {
		return procIdentity{}, false
	}
	st, ok := stat(pid)
	if !ok || st.PPID != parent || st.Session != pid || st.State == "Z" {
		return procIdentity{}, false
	}
	return procIdentity{pid: pid, start: st.Starttime}, true
}

// proc is /proc, opened once.
var proc = sync.OnceValues(func() (procfs.FS, error) { return procfs.NewFS(procfs.DefaultMountPoint) })

func stat(pid int) (procfs.ProcStat, bool) {
	fs, err := proc()
	if err != nil {
		return procfs.ProcStat{}, false
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return procfs.ProcStat{}, false
	}
	st, err := p.Stat()
	return st, err == nil
}

// groups returns the processes that have not exited, by process group.
func groups() map[int][]procfs.ProcStat {
	fs, err := proc()
	if err != nil {
		return nil
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil
	}
	gs := map[int][]procfs.ProcStat{}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.State != "Z" {
			gs[st.PGRP] = append(gs[st.PGRP], st)
		}
	}
	return gs
}

// groupLeft reports whether the process group id's program led is still there in gs: the
// program itself, or — once it died, as a program started to die with its parent does at
// once — what it started in its group. A session leader cannot leave its group, and a pid stays
// taken while a group of that number has a member, so a group of that number whose leader is
// gone is still the program's; one whose leader is another process (a later start time) is not.
func (id procIdentity) groupLeft(gs map[int][]procfs.ProcStat) bool {
	left := false
	for _, m := range gs[id.pid] {
		if m.PID == id.pid && m.Starttime != id.start {
			return false
		}
		left = left || m.Session == id.pid
	}
	return left
}

// terminalExited forgets the identity of a terminal's program once its instance daemon said it
// exited: what the program left running in its group is not the terminal's any more, and the
// instance daemon's own shutdown would not signal it either.
func (d *Daemon) terminalExited(in *instance, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, tr := range d.terms {
		if tr.inst == in.id && tr.id == id {
			tr.proc, tr.exited = procIdentity{}, true
		}
	}
}

// recorded returns the identities of in's terminal programs not known to have exited.
func (d *Daemon) recorded(in *instance) []procIdentity {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []procIdentity
	for _, tr := range d.terms {
		if tr.inst == in.id && tr.proc.pid != 0 {
			ids = append(ids, tr.proc)
		}
	}
	return ids
}

// killOrphans kills what is left of the process group of every terminal program of in that
// had not exited when its instance daemon went away, and waits, up to orphanWait, until each
// group is gone. Call it only once the instance daemon exited: until then it is the programs'
// parent and ends them itself.
func (d *Daemon) killOrphans(in *instance) {
	if len(d.recorded(in)) == 0 {
		return // an exit heard later only forgets a record: none now, none later
	}
	// The exits the instance daemon told before it ended are all heard once the watch
	// connection has ended, which it does when the instance daemon does.
	select {
	case <-in.heard:
	case <-time.After(orphanWait):
	}
	ids := d.recorded(in)
	if len(ids) == 0 {
		return
	}
	gs := groups()
	var killed []procIdentity
	for _, id := range ids {
		if id.groupLeft(gs) && syscall.Kill(-id.pid, syscall.SIGKILL) == nil {
			killed = append(killed, id)
		}
	}
	if len(killed) == 0 {
		return
	}
	d.log.Warn("killed the terminals an instance daemon left running", "instance", in.id, "count", len(killed))
	// They are no longer this daemon's descendants: whoever reaps orphans reaps them.
	ctx, cancel := context.WithTimeout(context.Background(), orphanWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(killed) > 0 {
		select {
		case <-ctx.Done():
			d.log.Warn("killed terminal programs are still running", "instance", in.id, "count", len(killed))
			return
		case <-tick.C:
		}
		gs = groups()
		killed = slices.DeleteFunc(killed, func(id procIdentity) bool { return !id.groupLeft(gs) })
	}
}
