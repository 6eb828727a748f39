package tracked

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/allox-os/allox/services/internal/memfd"
	"github.com/allox-os/allox/services/internal/netns"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Start validates the request, creates the run's cgroup and starts bwrap
// directly inside it (clone3 CLONE_INTO_CGROUP). Any failure before the
// sandbox exists returns ErrSandbox and nothing runs. The run outlives ctx.
func (m *Manager) Start(ctx context.Context, req StartRequest) (*Status, error) {
	cwd, err := validate(&req, m.cfg.AllowManaged)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{req.Workspace.Current, req.Workspace.Shared, req.Workspace.runTmpRoot()} {
		if under(p, m.cfg.RecordsDir) || under(m.cfg.RecordsDir, p) {
			return nil, invalid("workspace", "%q overlaps the records dir %q; records stay outside every workspace", p, m.cfg.RecordsDir)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := m.ids.next()
	dir := runDir(&m.cfg, id)
	r := &run{
		group: m.cg.group(req.AgentID, req.SessionID, id),
		done:  make(chan struct{}),
		st: &Status{
			RunID: id, AgentID: req.AgentID, SessionID: req.SessionID,
			Argv: append([]string(nil), req.Argv...), State: StateRunning, Managed: req.Managed,
			Tmp: filepath.Join(req.Workspace.runTmpRoot(), id),
		},
	}
	r.st.Cgroup = m.cg.path(r.group)
	cmd, release, cleanup, err := m.prepare(&req, r, dir, cwd)
	if err != nil {
		_ = os.RemoveAll(r.st.Tmp)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	r.st.Started = time.Now().UTC()
	err, leaveErr := startIn(req.Extra.NetNS, cmd)
	cleanup()
	if leaveErr != nil { // started, but from a thread that is now discarded: Pdeathsig kills it
		if r.ready != nil {
			r.ready.Close()
		}
		release.Close()
		_ = os.RemoveAll(r.st.Tmp)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrSandbox, m.abandon(cmd, r.group, leaveErr))
	}
	if err != nil {
		if r.ready != nil {
			r.ready.Close()
		}
		release.Close()
		closeOutput(cmd)
		_ = m.cg.remove(r.group)
		_ = os.RemoveAll(r.st.Tmp)
		_ = os.RemoveAll(dir)
		if errors.Is(err, unix.E2BIG) {
			// checkArgSize should have refused it; the request is still what is at fault.
			return nil, invalid("argv", "exec refused the command line as too long (E2BIG): pass long inputs on stdin or in a file in current/")
		}
		return nil, fmt.Errorf("%w: start bwrap: %w", ErrSandbox, err)
	}
	r.st.Pid = cmd.Process.Pid
	if r.ready != nil {
		err = awaitChild(r.ready)
	}
	if err == nil {
		err = m.cg.oomScoreAdj(r.group, RunOOMScoreAdj)
	}
	if err != nil {
		release.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrSandbox, m.abandon(cmd, r.group, err))
	}
	if err := m.admit(cmd, r, req.Hooks); err != nil {
		release.Close()
		_ = os.RemoveAll(r.st.Tmp)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	release.Close() // EOF on the block fd: bwrap runs the command
	m.mu.Lock()
	m.runs[id] = r
	st := r.st.clone()
	m.mu.Unlock()
	if err := writeStatus(dir, st); err != nil {
		_ = m.cg.kill(r.group) // a run without a record must not go on
	}
	go m.supervise(cmd, r, dir, req)
	return st, nil
}

// startIn starts cmd, from a thread inside ns when ns is set (Extra.NetNS): the child is forked
// on the calling thread and so is born in that thread's network namespace. err is cmd.Start's
// (or entering ns failed: nothing started); leaveErr, with cmd started, is the failure to switch
// the thread back, which discards the thread (netns.Do) and with it, through Pdeathsig, the
// launcher: the caller abandons the run.
func startIn(ns *os.File, cmd *exec.Cmd) (err, leaveErr error) {
	if ns == nil {
		return cmd.Start(), nil
	}
	var startErr error
	started := false
	doErr := netns.Do(ns, func() error {
		startErr = cmd.Start()
		started = startErr == nil
		return nil
	})
	switch {
	case doErr != nil && started:
		return nil, doErr
	case doErr != nil:
		return fmt.Errorf("session network namespace: %w", doErr), nil
	}
	return startErr, nil
}

// admit lets every hook take its first look while bwrap waits on its block fd, in order, with the
// group frozen if a hook asks (frozen). If one fails (or the group cannot be frozen or thawed), the run's cgroup is
// killed, the hooks that had begun see End, bwrap is reaped and the group removed before the
// error is returned: the command never ran.
func (m *Manager) admit(cmd *exec.Cmd, r *run, hooks []Hook) error {
	if len(hooks) == 0 {
		return nil
	}
	var err error
	freeze := frozen(hooks)
	if freeze {
		err = m.freeze(r.group, true)
	}
	begun := 0
	for ; err == nil && begun < len(hooks); begun++ {
		h := hooks[begun]
		meta, herr := h.Observer.Begin(m.status(r))
		if herr != nil {
			err = fmt.Errorf("%s: %w", h.Name, herr)
			break
		}
		m.setMeta(r, h.Name, meta)
	}
	if err == nil && freeze {
		err = m.freeze(r.group, false)
	}
	if err == nil {
		return nil
	}
	return m.abandon(cmd, r.group, err, func(killErr error) {
		st := m.status(r)
		st.State, st.Reason, st.Ended = StateFailed, "the run's start was abandoned: "+err.Error(), time.Now().UTC()
		for i := begun - 1; i >= 0; i-- {
			_, _ = hooks[i].Observer.End(st.clone(), errors.Join(err, killErr))
		}
	})
}

// frozen reports whether a hook of the run asks for its group frozen.
func frozen(hooks []Hook) bool {
	for _, h := range hooks {
		if h.Frozen {
			return true
		}
	}
	return false
}

// setMeta records a hook's metadata in the run's live record (nil changes nothing).
func (m *Manager) setMeta(r *run, name string, meta json.RawMessage) {
	if meta == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.st.Meta == nil {
		r.st.Meta = map[string]json.RawMessage{}
	}
	r.st.Meta[name] = meta
}

// abandon kills a run that was never released (cgroup.kill also ends frozen tasks), calls killed
// (the group emptied, or killErr), reaps bwrap and removes the group; it returns cause with
// whatever went wrong doing so.
func (m *Manager) abandon(cmd *exec.Cmd, group string, cause error, killed ...func(killErr error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	killErr := m.cg.killWait(ctx, group)
	for _, f := range killed {
		f(killErr)
	}
	_ = cmd.Wait()
	closeOutput(cmd)
	if killErr == nil {
		killErr = m.cg.remove(group)
	}
	return errors.Join(cause, killErr)
}

// freeze freezes or thaws a run's group, waiting at most killGrace.
func (m *Manager) freeze(group string, frozen bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	return m.cg.freeze(ctx, group, frozen)
}

// status is a copy of a run's current record.
func (m *Manager) status(r *run) *Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return r.st.clone()
}

// residue lets the hooks look at the processes a managed run left behind, with the group
// frozen, before supervise kills them.
func (m *Manager) residue(hooks []Hook, r *run) {
	var err error
	if frozen(hooks) {
		err = m.freeze(r.group, true)
	}
	for _, h := range hooks {
		if err != nil {
			break
		}
		if herr := h.Observer.Residue(m.status(r)); herr != nil {
			err = fmt.Errorf("%s: %w", h.Name, herr)
		}
	}
	if err != nil {
		m.mu.Lock()
		r.residueErr = err
		m.mu.Unlock()
	}
}

// endHooks freezes the empty group (if a hook asks) and lets the hooks take their last look, in
// reverse order.
// killErr is the failure to empty the group, if any; the hooks are told either way.
func (m *Manager) endHooks(hooks []Hook, group string, st *Status, killErr error) {
	if len(hooks) == 0 {
		return
	}
	quiesce := killErr
	if quiesce == nil && frozen(hooks) {
		quiesce = m.freeze(group, true)
	}
	for i := len(hooks) - 1; i >= 0; i-- {
		h := hooks[i]
		meta, err := h.Observer.End(st.clone(), quiesce)
		if meta != nil {
			if st.Meta == nil {
				st.Meta = map[string]json.RawMessage{}
			}
			st.Meta[h.Name] = meta
		}
		if err != nil {
			st.Reason = joinReason(st.Reason, h.Name+": "+err.Error())
		}
	}
}

// closeOutput closes the output files of a command that will not be supervised.
func closeOutput(cmd *exec.Cmd) {
	for _, w := range []any{cmd.Stdout, cmd.Stderr} {
		if bw, ok := w.(*boundedWriter); ok {
			bw.f.Close()
		}
	}
}

// prepare makes the run directory, its cgroup and the bwrap command. bwrap
// blocks on blockFD until release is closed. The returned cleanup closes the
// parent's copies of descriptors after Start.
func (m *Manager) prepare(req *StartRequest, r *run, dir, cwd string) (*exec.Cmd, *os.File, func(), error) {
	tmp := r.st.Tmp
	if err := m.makeRunDir(req, dir, tmp); errors.Is(err, errTmpFull) {
		tmp, r.st.Tmp = "", "" // a read-only empty /tmp, nothing to sync
	} else if err != nil {
		return nil, nil, nil, err
	}
	files := make([]*os.File, 0, 5)
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
		if req.attach != nil && req.attach.child != nil {
			req.attach.closeChild()
		}
	}
	var out [2]*boundedWriter
	for i, name := range []string{"stdout", "stderr"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		if req.attach != nil { // the output goes to the caller; the record's files stay empty
			f.Close()
			out[i] = &boundedWriter{max: m.cfg.MaxOutputBytes}
			continue
		}
		files = append(files, f)
		out[i] = &boundedWriter{f: f, max: m.cfg.MaxOutputBytes}
	}
	r.out = out
	if req.attach != nil {
		if err := req.attach.open(); err != nil {
			return nil, nil, nil, err
		}
		r.st.Attached = AttachedPipes
		if req.attach.term != nil {
			r.st.Attached = AttachedTerminal
		}
	}
	block, release, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("block fd: %w", err)
	}
	extra := []*os.File{block} // blockFD
	var cmd *exec.Cmd
	if req.Managed {
		cmd = managedCommand(req, cwd)
	} else {
		l, err := m.sandboxCmd(req, cwd, tmp)
		if err != nil {
			closeFiles(extra)
			closeAll()
			release.Close()
			return nil, nil, nil, err
		}
		cmd, r.ready = l.cmd, l.ready
		extra = append(extra, l.files...)
	}
	cgfd, err := m.cg.create(r.group)
	if err != nil {
		closeFiles(extra)
		closeAll()
		release.Close()
		if r.ready != nil {
			r.ready.Close()
		}
		return nil, nil, nil, fmt.Errorf("cgroup %s: %w", r.st.Cgroup, err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if a := req.attach; a != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = a.child[0], a.child[1], a.child[2]
		if a.term != nil && req.Managed { // a session of its own, its terminal the controlling one
			cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
		}
	} else {
		cmd.Stdin = bytes.NewReader(req.Stdin)
		cmd.Stdout, cmd.Stderr = out[0], out[1]
	}
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgfd.Fd())
	// bwrap dies with the daemon; --die-with-parent takes the sandbox along. Pdeathsig is tied to
	// the thread cmd is forked from, which the runtime keeps for the daemon's life unless a
	// goroutine ends locked to it (see the package doc, Network).
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.ExtraFiles = extra
	// The output files stay open in the writers until supervise ends.
	return cmd, release, func() {
		cgfd.Close()
		closeFiles(extra)
		if req.attach != nil {
			req.attach.closeChild()
		}
	}, nil
}

// launch is a sandboxed run's launcher: the command, the files the child inherits from argsFD
// on, and the read end of bwrap's --info-fd, whose first JSON object bwrap writes once the
// sandbox's child process exists (nil when the launcher has none).
type launch struct {
	cmd   *exec.Cmd
	files []*os.File
	ready *os.File
}

// boundaryCmd is the sandbox launcher of a run: bwrap with its options in a sealed memfd
// (argsFD), the seccomp filter in another (seccompFD), its --info-fd (infoFD), started as the
// run's unprivileged identity (no capability in the initial user namespace, ever; Go sets
// Pdeathsig after the switch, which would clear it).
func (m *Manager) boundaryCmd(req *StartRequest, cwd, tmp string) (*launch, error) {
	opts := append(bwrapArgs(&m.cfg, req, cwd, tmp, m.cfg.procMasks), "--info-fd", strconv.Itoa(infoFD))
	args, err := memfd.Sealed("bwrap-args", nulJoin(opts))
	if err != nil {
		return nil, err
	}
	filter, err := memfd.Sealed("seccomp", m.cfg.Seccomp)
	if err != nil {
		args.Close()
		return nil, err
	}
	ready, info, err := os.Pipe()
	if err != nil {
		closeFiles([]*os.File{args, filter})
		return nil, fmt.Errorf("info fd: %w", err)
	}
	argv := append(append(append([]string(nil), req.Extra.Prefix...), m.cfg.Bwrap, "--args", strconv.Itoa(argsFD), "--"), req.attach.argv(req.Argv)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + sandboxPath} // bwrap --clearenv anyway
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: m.cfg.RunUID, Gid: m.cfg.RunGID, Groups: []uint32{}}}
	return &launch{cmd: cmd, files: []*os.File{args, filter, info}, ready: ready}, nil
}

// awaitChild waits until bwrap has made the sandbox's child (its --info-fd answer), so that
// every process of the run exists before the manager sets what they must all have. A bwrap that
// dies first (EOF) is left to supervise to report.
func awaitChild(ready *os.File) error {
	defer ready.Close()
	if err := ready.SetReadDeadline(time.Now().Add(killGrace)); err != nil {
		return err
	}
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	err := json.NewDecoder(ready).Decode(&info)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bwrap --info-fd: %w", err)
	}
	return nil
}

// makeRunDir makes the run's record directory (the daemon's alone) and its private /tmp in the
// session's staging directory (traversable, so that bwrap, already unprivileged, can reach the
// /tmp it binds), owned by the run's identity. A sandboxed run's current/ belongs to that
// identity too (a workspace made before runs were unprivileged is handed over at its first run;
// files inside keep their owner), and so does shared/ when runs may write it.
//
// The staging directory is in the session's quota: when the session (or its agent, or the store)
// is full, even the private /tmp's mkdir gets EDQUOT or ENOSPC. The run still starts (its writes
// would fail the same way), with a read-only empty /tmp: makeRunDir returns errTmpFull after
// everything else is made.
func (m *Manager) makeRunDir(req *StartRequest, dir, tmp string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := makeStaging(filepath.Dir(tmp)); err != nil {
		return err
	}
	var tmpErr error
	if err := os.Mkdir(tmp, 0o700); errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.ENOSPC) {
		tmpErr = errTmpFull
	} else if err != nil {
		return fmt.Errorf("private /tmp: %w", err)
	}
	if req.Managed {
		return tmpErr
	}
	if err := m.ownRunDirs(req, tmp, tmpErr == nil); err != nil {
		return err
	}
	return tmpErr
}

// errTmpFull is makeRunDir's report that the private /tmp could not be made for want of space.
var errTmpFull = errors.New("private /tmp: no space in the session's quota")

// ownRunDirs hands the private /tmp (if made), current/ and (if writable) shared/ to the run's
// identity.
func (m *Manager) ownRunDirs(req *StartRequest, tmp string, haveTmp bool) error {
	if !haveTmp {
		return m.ownWorkspace(req)
	}
	if err := os.Lchown(tmp, int(m.cfg.RunUID), int(m.cfg.RunGID)); err != nil {
		return fmt.Errorf("private /tmp: %w", err)
	}
	if err := traversable(filepath.Dir(tmp), m.cfg.RunUID, m.cfg.RunGID); err != nil {
		return fmt.Errorf("private /tmp staging: %w", err)
	}
	return m.ownWorkspace(req)
}

// ownWorkspace hands current/ and (if runs may write it) shared/ to the run's identity.
func (m *Manager) ownWorkspace(req *StartRequest) error {
	if m.cfg.SharedWritable || req.Workspace.SharedWritable {
		if err := ownTo(req.Workspace.Shared, m.cfg.RunUID, m.cfg.RunGID); err != nil {
			return err
		}
	}
	return ownTo(req.Workspace.Current, m.cfg.RunUID, m.cfg.RunGID)
}

// makeStaging makes the session's /tmp staging directory, root's and traversable (0711), unless
// it is there; a symlink or anything else in its place is refused.
func makeStaging(dir string) error {
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("private /tmp staging: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("private /tmp staging: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("private /tmp staging %s is not the daemon's directory (mode %#o, uid %d): remove it", dir, st.Mode, st.Uid)
	}
	if st.Mode&0o7777 != 0o711 {
		return os.Chmod(dir, 0o711)
	}
	return nil
}

// ownTo makes dir (not a symlink) owned by uid:gid unless it already is.
func ownTo(dir string, uid, gid uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st.Uid == uid && st.Gid == gid {
		return nil
	}
	return os.Lchown(dir, int(uid), int(gid))
}

// nulJoin is bwrap's --args format: every argument ends with a NUL byte.
func nulJoin(args []string) []byte {
	var b []byte
	for _, a := range args {
		b = append(append(b, a...), 0)
	}
	return b
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// supervise waits for the run, enforces its timeout, empties and removes
// its cgroup, syncs /tmp after a normal exit and finalizes the record.
func (m *Manager) supervise(cmd *exec.Cmd, r *run, dir string, req StartRequest) {
	if req.Timeout > 0 {
		t := time.AfterFunc(req.Timeout, func() { _ = m.killRun(r, StateTimedOut) })
		defer t.Stop()
	}
	waitErr := cmd.Wait()
	for _, w := range r.out {
		if w.f != nil {
			w.f.Close()
		}
	}
	if len(req.Hooks) > 0 && m.cg.populated(r.group) {
		m.residue(req.Hooks, r)
	}
	// The PID namespace dies with its init; kill anyway so nothing that
	// escaped into the group survives, and wait until it is empty.
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	killErr := m.cg.killWait(ctx, r.group)
	cancel()
	events, evErr := m.cg.events(r.group)

	m.mu.Lock()
	st := r.st.clone()
	reason, residueErr := r.killReason, r.residueErr
	m.mu.Unlock()
	st.Ended = time.Now().UTC()
	st.StdoutDropped, st.StderrDropped = r.out[0].droppedBytes(), r.out[1].droppedBytes()
	finish(st, cmd.ProcessState, waitErr, reason, dir)
	applyEvents(st, events, reason)
	if evErr != nil {
		st.Reason = joinReason(st.Reason, "limit events: "+evErr.Error())
	}
	if residueErr != nil {
		st.Reason = joinReason(st.Reason, residueErr.Error())
	}
	if st.State == StateExited && !req.Managed && st.Tmp != "" {
		owner := [2]int{int(m.cfg.RunUID), int(m.cfg.RunGID)}
		if err := syncTmp(st.Tmp, req.Workspace.Current, owner); err != nil {
			st.Reason = joinReason(st.Reason, "tmp sync: "+err.Error())
		}
	}
	m.endHooks(req.Hooks, r.group, st, killErr)
	if killErr == nil {
		killErr = m.cg.remove(r.group)
	}
	if killErr != nil {
		st.Reason = joinReason(st.Reason, killErr.Error())
	}
	_ = os.RemoveAll(st.Tmp)
	if err := writeStatus(dir, st); err != nil {
		st.Reason = joinReason(st.Reason, "record: "+err.Error())
	}
	m.mu.Lock()
	r.st = st
	m.mu.Unlock()
	m.notify(EventExit, st)
	// Pruned before the run counts as ended: it is kept (the newest of its session), and older
	// records are gone by the time a waiter sees it end.
	m.prune(st.AgentID, st.SessionID)
	close(r.done)
}

func (m *Manager) notify(event string, st *Status) {
	if m.cfg.Notify != nil {
		m.cfg.Notify(event, st.clone())
	}
}

// finish sets state, exit code and signal from bwrap's wait status.
func finish(st *Status, ps *os.ProcessState, waitErr error, killReason, dir string) {
	st.State = StateExited
	if ps == nil {
		st.State, st.ExitCode, st.Reason = StateFailed, -1, fmt.Sprint(waitErr)
		return
	}
	st.ExitCode = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.Signal = ws.Signal().String()
	}
	switch {
	case killReason == StateTimedOut:
		st.State, st.Reason = StateTimedOut, "timeout reached; run cgroup killed"
	case killReason != "":
		st.State, st.Reason = StateKilled, "run cgroup killed"
	case st.Signal != "":
		st.State, st.Reason = StateKilled, "bwrap killed by signal "+st.Signal
	case st.ExitCode == 1:
		// bwrap reports its own setup failures as "bwrap: ..." on stderr
		// and exit code 1; the command never ran.
		if msg := setupFailure(filepath.Join(dir, "stderr")); msg != "" {
			st.State, st.Reason = StateFailed, msg
		}
	}
}

func setupFailure(stderrPath string) string {
	b, _, _, err := readChunk(stderrPath, 0, 4096)
	if err != nil || !bytes.HasPrefix(b, []byte("bwrap: ")) {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return "sandbox setup failed: " + line
}

func joinReason(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

func sortStatuses(s []*Status) {
	sort.Slice(s, func(i, j int) bool { return s[i].RunID < s[j].RunID })
}

// Dropped is how many bytes of a run's stream its bound (Config.MaxOutputBytes) has dropped so
// far: the stream's output was truncated when it is not 0.
func (m *Manager) Dropped(runID, stream string) (int64, error) {
	i := 0
	switch stream {
	case "stdout":
	case "stderr":
		i = 1
	default:
		return 0, invalid("stream", "%q: use \"stdout\" or \"stderr\"", stream)
	}
	r, err := m.lookup(runID)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := r.out[i]; w != nil && r.st.live() {
		return w.droppedBytes(), nil
	}
	return [2]int64{r.st.StdoutDropped, r.st.StderrDropped}[i], nil
}

// Output reads up to limit bytes (default 64 KiB, at most 1 MiB) of a run's
// stdout or stderr from offset. next is the offset to ask for next; eof is
// true once the run has ended and everything was read.
func (m *Manager) Output(runID, stream string, offset, limit int64) ([]byte, int64, bool, error) {
	if stream != "stdout" && stream != "stderr" {
		return nil, 0, false, invalid("stream", "%q: use \"stdout\" or \"stderr\"", stream)
	}
	if offset < 0 {
		return nil, 0, false, invalid("offset", "%d: must be >= 0", offset)
	}
	if limit <= 0 {
		limit = 64 << 10
	}
	limit = min(limit, maxOutputChunk)
	r, err := m.lookup(runID)
	if err != nil {
		return nil, 0, false, err
	}
	ended := false
	select {
	case <-r.done:
		ended = true
	default:
	}
	data, next, size, err := readChunk(filepath.Join(runDir(&m.cfg, runID), stream), offset, limit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, offset, ended, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("output %s %s: %w", runID, stream, err)
	}
	return data, next, ended && next >= size, nil
}
