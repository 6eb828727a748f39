package sessionshare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionshare/shareproto"
	"github.com/allox-os/allox/services/internal/workspace"
)

func (p *Plugin) actions() map[string]plugin.Action {
	return map[string]plugin.Action{
		shareproto.ActionEnable:  {Handler: p.enable, Scope: plugin.ScopeSession},
		shareproto.ActionDisable: {Handler: p.disable, Scope: plugin.ScopeSession},
		shareproto.ActionStatus:  {Handler: p.status, Scope: plugin.ScopeSession, ReadOnly: true},
		shareproto.ActionLs:      {Handler: p.ls, Scope: plugin.ScopeSession, ReadOnly: true},
		shareproto.ActionStat:    {Handler: p.stat, Scope: plugin.ScopeSession, ReadOnly: true},
		shareproto.ActionRead:    {Handler: p.read, Scope: plugin.ScopeSession, ReadOnly: true, Stream: true},
		shareproto.ActionWrite:   {Handler: p.write, Scope: plugin.ScopeSession, Stream: true},
	}
}

// refusal is a decision against a request: its rpc code, the param at fault and the reason.
type refusal struct {
	code   rpc.Code
	field  string
	reason string
}

func refuse(code rpc.Code, field, reason string) *refusal {
	return &refusal{code: code, field: field, reason: reason}
}

// caller is the router-bound session of a session-socket call.
type caller struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
}

func (c caller) key() key { return key{c.AgentID, c.SessionID} }

// request is one share access being decided: who, what, where.
type request struct {
	action string
	from   key
	target key
	path   string
	start  time.Time
}

// fail audits the refusal and returns it as the call's error: one line naming the target, the
// path and the reason.
func (p *Plugin) fail(q *request, r *refusal) error {
	p.record(q, 0, Denied, r)
	where := q.target.String()
	if q.path != "" {
		where += " " + q.path
	}
	if q.target == (key{}) {
		where = q.from.String()
	}
	return rpc.Errorf(r.code, r.field, "%s %s: %s", q.action, where, r.reason)
}

func (p *Plugin) record(q *request, n int64, decision string, r *refusal) {
	rec := Record{AgentID: q.from.agent, SessionID: q.from.session, Action: q.action, Path: q.path, Bytes: n,
		Decision: decision, DurationNS: time.Since(q.start).Nanoseconds()}
	if q.target != (key{}) {
		rec.Target = q.target.String()
	}
	if r != nil {
		rec.Code, rec.Reason = string(r.code), r.reason
	}
	if err := p.audit.append(rec); err != nil {
		p.log.Warn("session share: audit write failed", "error", err.Error())
	}
}

// parseTarget reads "agent/session".
func parseTarget(s string) (key, *refusal) {
	a, b, ok := strings.Cut(s, "/")
	if !ok || a == "" || b == "" || strings.Contains(b, "/") {
		return key{}, refuse(rpc.CodeInvalidParams, "params.target", fmt.Sprintf("params.target %q: name the session as agent/session, e.g. agent-b/session-1", s))
	}
	return key{a, b}, nil
}

// decide checks that from may access target (both share; write needs the target's write
// permission) and returns the target's state.
func (p *Plugin) decide(q *request, write bool) (record, *refusal) {
	if _, ok := p.get(q.from); !ok {
		return record{}, refuse(rpc.CodeForbidden, "session_id", fmt.Sprintf("not enabled: your session %s does not share; only sessions that share see the others: run allox share enable first", q.from))
	}
	t, ok := p.get(q.target)
	if !ok {
		return record{}, refuse(rpc.CodeForbidden, "params.target", "not enabled: the target session does not share (it has not run allox share enable, or it disabled it)")
	}
	if write && t.Permission != shareproto.Write {
		return record{}, refuse(rpc.CodeForbidden, "params.target", "read-only: the target shares its scope for reading only (the target grants writes with allox share enable --permission write)")
	}
	return t, nil
}

// lease takes the target's lease: refused while a rollback of it is in progress.
func (p *Plugin) lease(target key) (func(), *refusal) {
	release, err := p.ws.Lease(target.agent, target.session)
	if errors.Is(err, workspace.ErrSessionBusy) {
		return nil, refuse(rpc.CodeConflict, "params.target", "target busy: a rollback of the target session is in progress; retry when it is done")
	}
	if err != nil {
		return nil, refuse(rpc.CodeInternal, "params.target", err.Error())
	}
	return release, nil
}

func (p *Plugin) enable(_ context.Context, c *plugin.Call) (any, error) {
	var q struct {
		caller
		shareproto.EnableParams
	}
	if err := rpc.DecodeParams(c.Params, &q); err != nil {
		return nil, err
	}
	req := &request{action: shareproto.ActionEnable, from: q.key(), start: time.Now()}
	if q.Permission == "" {
		q.Permission = shareproto.Read
	}
	if q.Permission != shareproto.Read && q.Permission != shareproto.Write {
		return nil, p.fail(req, refuse(rpc.CodeInvalidParams, "params.permission", fmt.Sprintf("params.permission %q: use %q (the default) or %q", q.Permission, shareproto.Read, shareproto.Write)))
	}
	if err := checkScope(q.Scope); err != nil {
		return nil, p.fail(req, refuse(rpc.CodeInvalidParams, "params.scope", fmt.Sprintf("params.scope %q: %v", q.Scope, err)))
	}
	dir, r := p.scopeDir(q.key(), q.Scope)
	if r != nil {
		r.field = "params.scope"
		r.reason += ": create the directory first, or share another one"
		return nil, p.fail(req, r)
	}
	dir.Close()
	rec := record{AgentID: q.AgentID, SessionID: q.SessionID, Scope: q.Scope, Permission: q.Permission}
	p.mu.Lock()
	err := p.save(q.key(), &rec)
	if err == nil {
		p.sessions[q.key()] = rec
	}
	p.mu.Unlock()
	if err != nil {
		return nil, p.fail(req, refuse(rpc.CodeInternal, "", "save the share state: "+err.Error()))
	}
	p.record(req, 0, Allowed, nil)
	return p.stateOf(q.key()), nil
}

func (p *Plugin) disable(_ context.Context, c *plugin.Call) (any, error) {
	var q caller
	if err := rpc.DecodeParams(c.Params, &q); err != nil {
		return nil, err
	}
	req := &request{action: shareproto.ActionDisable, from: q.key(), start: time.Now()}
	p.mu.Lock()
	err := p.save(q.key(), nil)
	if err == nil {
		delete(p.sessions, q.key())
	}
	p.mu.Unlock()
	if err != nil {
		return nil, p.fail(req, refuse(rpc.CodeInternal, "", "remove the share state: "+err.Error()))
	}
	p.record(req, 0, Allowed, nil)
	return p.stateOf(q.key()), nil
}

func (p *Plugin) status(_ context.Context, c *plugin.Call) (any, error) {
	var q caller
	if err := rpc.DecodeParams(c.Params, &q); err != nil {
		return nil, err
	}
	return p.stateOf(q.key()), nil
}

// stateOf is k's share state as the actions reply it.
func (p *Plugin) stateOf(k key) shareproto.State {
	r, ok := p.get(k)
	if !ok {
		return shareproto.State{}
	}
	return shareproto.State{Enabled: true, Scope: r.Scope, Permission: r.Permission, Peers: p.peers(k),
		MaxRead: p.cfg.MaxRead, MaxWrite: p.cfg.MaxWrite}
}

// begin decodes a path request and decides it up to the open: the caller and the target share
// (write: the target grants writes), the path stays in the scope, the target is not rolling back.
// It returns the scope's directory and the lease, both for the caller to release.
func (p *Plugin) begin(action string, c *plugin.Call, params any, target, path *string, write bool) (*request, *os.File, func(), error) {
	var q caller
	if err := rpc.DecodeParams(c.Params, params); err != nil {
		return nil, nil, nil, err
	}
	_ = json.Unmarshal(c.Params, &q)
	req := &request{action: action, from: q.key(), path: *path, start: time.Now()}
	t, r := parseTarget(*target)
	if r != nil {
		return nil, nil, nil, p.fail(req, r)
	}
	req.target = t
	clean, r := checkPath(*path)
	if r != nil {
		return nil, nil, nil, p.fail(req, r)
	}
	rec, r := p.decide(req, write)
	if r != nil {
		return nil, nil, nil, p.fail(req, r)
	}
	release, r := p.lease(t)
	if r != nil {
		return nil, nil, nil, p.fail(req, r)
	}
	dir, r := p.scopeDir(t, rec.Scope)
	if r != nil {
		release()
		return nil, nil, nil, p.fail(req, r)
	}
	*path = clean
	return req, dir, release, nil
}

func (p *Plugin) ls(_ context.Context, c *plugin.Call) (any, error) {
	var q struct {
		caller
		shareproto.PathParams
	}
	req, dir, release, err := p.begin(shareproto.ActionLs, c, &q, &q.Target, &q.Path, false)
	if err != nil {
		return nil, err
	}
	defer release()
	defer dir.Close()
	fd, err := openBeneath(int(dir.Fd()), q.Path, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, p.fail(req, openError(err))
	}
	d := os.NewFile(uintptr(fd), q.Path)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, p.fail(req, refuse(rpc.CodeInternal, "params.path", err.Error()))
	}
	slices.Sort(names)
	out := shareproto.Listing{Target: req.target.String(), Path: q.Path, Entries: []shareproto.Entry{}}
	if len(names) > shareproto.MaxEntries {
		names, out.Truncated = names[:shareproto.MaxEntries], true
	}
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // gone since the listing
		}
		e := entry(n, &st)
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			buf := make([]byte, 4096)
			if k, err := unix.Readlinkat(fd, n, buf); err == nil {
				e.LinkTo = string(buf[:k])
			}
		}
		out.Entries = append(out.Entries, e)
	}
	p.record(req, 0, Allowed, nil)
	return out, nil
}

func entry(name string, st *unix.Stat_t) shareproto.Entry {
	return shareproto.Entry{Name: name, Type: fileType(st.Mode), Size: st.Size, Mode: fmt.Sprintf("%04o", st.Mode&0o7777),
		MTime: st.Mtim.Nano()}
}

func (p *Plugin) stat(_ context.Context, c *plugin.Call) (any, error) {
	var q struct {
		caller
		shareproto.PathParams
	}
	req, dir, release, err := p.begin(shareproto.ActionStat, c, &q, &q.Target, &q.Path, false)
	if err != nil {
		return nil, err
	}
	defer release()
	defer dir.Close()
	fd, err := openBeneath(int(dir.Fd()), q.Path, unix.O_PATH)
	if err != nil {
		return nil, p.fail(req, openError(err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, p.fail(req, refuse(rpc.CodeInternal, "params.path", err.Error()))
	}
	e := entry(filepath.Base(q.Path), &st)
	e.Links = uint64(st.Nlink)
	p.record(req, 0, Allowed, nil)
	return e, nil
}

// read decides and opens the file, then streams it (shareproto: header, bytes, trailer).
func (p *Plugin) read(_ context.Context, c *plugin.Call) (any, error) {
	var q struct {
		caller
		shareproto.PathParams
	}
	req, dir, release, err := p.begin(shareproto.ActionRead, c, &q, &q.Target, &q.Path, false)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	f, size, r := p.openRead(int(dir.Fd()), q.Path)
	if r != nil {
		release()
		return nil, p.fail(req, r)
	}
	t := p.transfer(req, release, f.Close)
	return plugin.Relay(func(conn io.ReadWriteCloser) error {
		if !t.start() {
			conn.Close()
			return errors.New("share read: the transfer was abandoned before its stream started")
		}
		n, err := p.sendFile(conn, f, size)
		conn.Close()
		t.end(n, err)
		return err
	}), nil
}

// openRead opens a regular, singly linked file of at most MaxRead bytes beneath dirfd, without
// blocking on a FIFO or a device.
func (p *Plugin) openRead(dirfd int, path string) (*os.File, int64, *refusal) {
	fd, err := openBeneath(dirfd, path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, 0, openError(err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, 0, refuse(rpc.CodeInternal, "params.path", err.Error())
	}
	if r := regular(&st); r != nil {
		f.Close()
		return nil, 0, r
	}
	if st.Size > p.cfg.MaxRead {
		f.Close()
		return nil, 0, refuse(rpc.CodeInvalidParams, "params.path", fmt.Sprintf("too large: %d bytes, and share reads at most %d bytes (the daemon's limit)", st.Size, p.cfg.MaxRead))
	}
	return f, st.Size, nil
}

// chunk is the transfers' buffer size.
const chunk = 1 << 20

// sendFile writes the read stream: header, exactly size bytes of f, trailer. Each write must
// progress within the idle timeout.
func (p *Plugin) sendFile(conn io.ReadWriteCloser, f *os.File, size int64) (int64, error) {
	dl, _ := conn.(interface{ SetWriteDeadline(time.Time) error })
	w := &idleWriter{w: conn, dl: dl, idle: p.cfg.Idle}
	if err := writeLine(w, shareproto.ReadHeader{Size: size}); err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(w, io.LimitReader(f, size), make([]byte, max(min(size, chunk), 512)))
	if err == nil && n < size {
		err = fmt.Errorf("the file shrank while it was read: %d of %d bytes", n, size)
	}
	if err != nil {
		return n, err
	}
	return n, writeLine(w, shareproto.Result{OK: true, Bytes: n})
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// idleWriter bounds each write by the idle timeout, where the stream has deadlines.
type idleWriter struct {
	w    io.Writer
	dl   interface{ SetWriteDeadline(time.Time) error }
	idle time.Duration
}

func (w *idleWriter) Write(b []byte) (int, error) {
	if w.dl != nil {
		_ = w.dl.SetWriteDeadline(time.Now().Add(w.idle))
	}
	return w.w.Write(b)
}

// transfer is a decided transfer's lease and open files until its stream ends — or until the
// idle timeout passes without the stream starting (the router could not switch it).
type transfer struct {
	p       *Plugin
	req     *request
	once    sync.Once
	mu      sync.Mutex
	started bool
	done    bool
	cleanup func()
	timer   *time.Timer
}

func (p *Plugin) transfer(req *request, release func(), closers ...func() error) *transfer {
	t := &transfer{p: p, req: req}
	t.cleanup = func() {
		for _, c := range closers {
			_ = c()
		}
		release()
	}
	t.timer = time.AfterFunc(p.cfg.Idle, func() {
		t.mu.Lock()
		abandoned := !t.started
		t.done = abandoned || t.done
		t.mu.Unlock()
		if abandoned {
			t.once.Do(t.cleanup)
			p.record(req, 0, Failed, refuse(rpc.CodeInternal, "", "the stream never started"))
		}
	})
	return t
}

func (t *transfer) start() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return false
	}
	t.started = true
	t.timer.Stop()
	return true
}

func (t *transfer) end(n int64, err error) {
	t.once.Do(t.cleanup)
	if err != nil {
		t.p.record(t.req, n, Failed, refuse(rpc.CodeInternal, "", err.Error()))
		return
	}
	t.p.record(t.req, n, Allowed, nil)
}

// write decides the write and creates its temporary file, then receives exactly size bytes into
// it and renames it over the name (shareproto: one Result line back).
func (p *Plugin) write(_ context.Context, c *plugin.Call) (any, error) {
	var q struct {
		caller
		shareproto.WriteParams
	}
	req, dir, release, err := p.begin(shareproto.ActionWrite, c, &q, &q.Target, &q.Path, true)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	fail := func(r *refusal) error { release(); return p.fail(req, r) }
	switch {
	case q.Size < 0:
		return nil, fail(refuse(rpc.CodeInvalidParams, "params.size", fmt.Sprintf("params.size %d: give the exact byte count to write, 0 or more", q.Size)))
	case q.Size > p.cfg.MaxWrite:
		return nil, fail(refuse(rpc.CodeInvalidParams, "params.size", fmt.Sprintf("too large: %d bytes, and share writes at most %d bytes (the daemon's limit)", q.Size, p.cfg.MaxWrite)))
	case q.Path == ".":
		return nil, fail(refuse(rpc.CodeInvalidParams, "params.path", "params.path is required: the file to write, relative to the target's scope"))
	}
	if n := p.ws.ActiveRuns(req.target.agent, req.target.session); n > 0 {
		return nil, fail(refuse(rpc.CodeConflict, "params.target", fmt.Sprintf("target busy: the target session has %d live run(s), and share writes only into a quiet session; retry when they ended", n)))
	}
	w, r := p.createTemp(int(dir.Fd()), q.Path)
	if r != nil {
		return nil, fail(r)
	}
	t := p.transfer(req, release, w.abort)
	return plugin.Relay(func(conn io.ReadWriteCloser) error {
		if !t.start() {
			conn.Close()
			return errors.New("share write: the transfer was abandoned before its stream started")
		}
		n, err := p.receive(conn, w, q.Size)
		res := shareproto.Result{OK: err == nil, Bytes: n}
		if err != nil {
			res.Code, res.Error = string(rpc.CodeInvalidParams), fmt.Sprintf("%s %s %s: %v; nothing was written", req.action, req.target, q.Path, err)
		}
		_ = writeLine(&idleWriter{w: conn, dl: deadliner(conn), idle: p.cfg.Idle}, res)
		conn.Close()
		t.end(n, err)
		return err
	}), nil
}

func deadliner(conn io.ReadWriteCloser) interface{ SetWriteDeadline(time.Time) error } {
	dl, _ := conn.(interface{ SetWriteDeadline(time.Time) error })
	return dl
}

// pending is a write's temporary file in the target's directory.
type pending struct {
	dir       int // the target's directory, held until the rename
	tmp, name string
	f         *os.File
	renamed   bool
}

// abort drops the temporary file unless it was renamed; it closes both fds.
func (w *pending) abort() error {
	w.f.Close()
	if !w.renamed {
		_ = unix.Unlinkat(w.dir, w.tmp, 0)
	}
	return unix.Close(w.dir)
}

// createTemp opens the target's directory beneath the scope and creates the temporary file in it
// (O_EXCL, the runs' owner, the replaced file's mode or 0644).
func (p *Plugin) createTemp(scopefd int, path string) (*pending, *refusal) {
	parent, name := filepath.Split(path)
	if parent == "" {
		parent = "."
	}
	dfd, err := openBeneath(scopefd, parent, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, openError(err)
	}
	mode := uint32(0o644)
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(dfd)
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return nil, refuse(rpc.CodeInvalidParams, "params.path", "a directory: name a file to write")
			}
			return nil, refuse(rpc.CodeForbidden, "params.path", fmt.Sprintf("not a regular file (a %s): share replaces regular files only", kind(st.Mode)))
		}
		mode = st.Mode & 0o777
	case !errors.Is(err, unix.ENOENT):
		unix.Close(dfd)
		return nil, openError(err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".allox-share-" + hex.EncodeToString(rnd[:]) + ".tmp"
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		unix.Close(dfd)
		return nil, openError(err)
	}
	w := &pending{dir: dfd, tmp: tmp, name: name, f: os.NewFile(uintptr(fd), tmp)}
	uid, gid := p.ws.RunIdentity()
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		w.abort()
		return nil, refuse(rpc.CodeInternal, "params.path", "give the file to the runs' owner: "+err.Error())
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		w.abort()
		return nil, refuse(rpc.CodeInternal, "params.path", err.Error())
	}
	return w, nil
}

// receive copies exactly size bytes of conn into w's file (each read within the idle timeout),
// syncs it and renames it over the name.
func (p *Plugin) receive(conn io.ReadWriteCloser, w *pending, size int64) (int64, error) {
	dl, _ := conn.(interface{ SetReadDeadline(time.Time) error })
	r := &idleReader{r: conn, dl: dl, idle: p.cfg.Idle}
	n, err := io.CopyBuffer(w.f, io.LimitReader(r, size), make([]byte, max(min(size, chunk), 512)))
	switch {
	case err != nil:
		return n, fmt.Errorf("the stream failed after %d of %d bytes: %w", n, size, err)
	case n < size:
		return n, fmt.Errorf("the stream ended after %d of the %d bytes params.size announced", n, size)
	}
	if err := w.f.Sync(); err != nil {
		return n, err
	}
	if err := unix.Renameat(w.dir, w.tmp, w.dir, w.name); err != nil {
		return n, fmt.Errorf("rename into place: %w", err)
	}
	w.renamed = true
	return n, nil
}

type idleReader struct {
	r    io.Reader
	dl   interface{ SetReadDeadline(time.Time) error }
	idle time.Duration
}

func (r *idleReader) Read(b []byte) (int, error) {
	if r.dl != nil {
		_ = r.dl.SetReadDeadline(time.Now().Add(r.idle))
	}
	return r.r.Read(b)
}
