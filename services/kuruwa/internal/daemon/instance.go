package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/entry"
	instd "github.com/allox-os/allox/services/kuruwa/internal/instance"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
	"golang.org/x/sys/unix"
)

// instance is a sandbox instance served by its own instance daemon.
type instance struct {
	id, name, def  string
	owner          *tenant // the tenant object, not its name: a tenant added again under the name is another
	agent, session string  // an allox_session instance's
	sock           string  // the outer path of its listener, which this daemon bound
	state          string  // transcripts and the instance daemon's log
	cmd            *exec.Cmd
	daemonPID      int // the instance daemon's pid here, or 0 if it has a pid namespace of its own
	exited         chan struct{}
	heard          chan struct{} // closed once the watch connection ended: every exit it told has been heard
	valid          bool          // false for good once its daemon exited
	launching      bool          // reserved while its init runs; no request sees it until ready
	destroying     bool
	cleaned        bool
}

func (d *Daemon) nextID(prefix string) string {
	d.seq++
	return fmt.Sprintf("%s%d-%d", prefix, d.gen, d.seq)
}

// createInstance starts an instance of def for t. It is handed out only once its instance
// daemon answered on the adopted listener; an init that fails or never gets there is killed
// and cleaned up.
func (d *Daemon) createInstance(t *tenant, a wire.InstanceArgs) (*instance, error) {
	defName, name := a.Definition, a.Name
	def := d.cfg.Definitions[defName]
	if err := d.checkSession(def, &a); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if name == "" {
		name = fmt.Sprintf("%s-%d", defName, d.seq+1)
	}
	if err := config.CheckName(name); err != nil {
		d.mu.Unlock()
		return nil, wire.Errorf(wire.CodeBadRequest, "name", "instance %v", err)
	}
	if isInstanceID(name) {
		d.mu.Unlock()
		return nil, wire.Errorf(wire.CodeBadRequest, "name", "instance name %q has the shape of an instance id (i<generation>-<n>), which names another instance; choose another name", name)
	}
	if d.instanceByName(name) != nil {
		d.mu.Unlock()
		return nil, wire.Errorf(wire.CodeConflict, "name", "an instance named %q exists; choose another name or clean it", name)
	}
	in := &instance{id: d.nextID("i"), name: name, def: defName, owner: t, agent: a.Agent, session: a.Session,
		exited: make(chan struct{}), heard: make(chan struct{}), launching: true}
	in.sock = filepath.Join(d.dir, "inst", in.id, "sock")
	in.state = filepath.Join(d.dir, "state", in.id)
	d.instances[in.id] = in // reserved, not valid: no request reaches it yet
	d.mu.Unlock()

	if err := d.launch(in, def); err != nil {
		d.mu.Lock()
		delete(d.instances, in.id)
		d.mu.Unlock()
		d.cleanupFiles(in, def)
		return nil, err
	}
	d.mu.Lock()
	in.valid, in.launching = true, false
	closing := d.closing
	d.mu.Unlock()
	go d.watch(in)
	if closing { // shutdown began while the init ran: it skipped this instance
		d.destroy(in)
		return nil, wire.Errorf(wire.CodeGone, "instance", "the daemon is shutting down")
	}
	d.log.Info("instance ready", "instance", in.id, "name", in.name, "definition", defName, "owner", t.name)
	return in, nil
}

// instanceID is the shape of an instance's id (nextID), which no instance name has.
var instanceID = regexp.MustCompile(`^i[0-9]+-[0-9]+$`)

func isInstanceID(ref string) bool { return instanceID.MatchString(ref) }

// instanceByName is the instance ref names: by its id if ref has the shape of one, else by name.
func (d *Daemon) instanceByName(ref string) *instance {
	if isInstanceID(ref) {
		return d.instances[ref]
	}
	for _, in := range d.instances {
		if in.name == ref {
			return in
		}
	}
	return nil
}

// launch binds the listener outside, runs the init with it as descriptor 3 (and the state
// directory as 4), and waits for the instance daemon's hello.
func (d *Daemon) launch(in *instance, def config.Definition) error {
	if err := entry.SecureDir(filepath.Dir(in.sock)); err != nil {
		return err
	}
	if err := entry.SecureDir(in.state); err != nil {
		return err
	}
	lf, err := bindListener(in.sock)
	if err != nil {
		return err
	}
	defer lf.Close()
	sf, err := os.OpenFile(in.state, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open state %s: %w", in.state, err)
	}
	defer sf.Close()
	logf, err := os.OpenFile(filepath.Join(in.state, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("instance log: %w", err)
	}
	defer logf.Close()
	argv := append(append([]string{}, def.Init...), d.self, "instance-daemon", "--id", in.id)
	if sd := def.Session; sd != nil {
		argv = append(argv, "--allox-daemon", sd.Daemon, "--agent", in.agent, "--session", in.session)
		if sd.TokenFile != "" {
			argv = append(argv, "--allox-token-file", sd.TokenFile)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = []*os.File{lf, sf}
	cmd.Env = append(instanceEnv(), instd.EnvListenFD+"=3", instd.EnvStateFD+"=4")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return wire.Errorf(wire.CodeInternal, "definition", "definition %s: start init %s: %v", def.Name, argv[0], err)
	}
	in.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(in.exited)
	}()
	_ = lf.Close() // the instance daemon holds the only copy now
	if err := d.awaitReady(in, def); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-in.exited
		return err
	}
	return nil
}

// instanceEnv is the daemon's environment without anything naming a Kuruwa entry or a listener.
func instanceEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "KURUWA_") || strings.HasPrefix(k, "LISTEN_") || k == "NOTIFY_SOCKET" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func bindListener(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	_ = os.Remove(path)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", path, err)
	}
	if err := unix.Chmod(path, 0o600); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (d *Daemon) awaitReady(in *instance, def config.Definition) error {
	done := make(chan error, 1)
	deadline := time.Now().Add(def.ReadyTimeout)
	go func() {
		c, err := net.DialTimeout("unix", in.sock, def.ReadyTimeout)
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		var h wire.Hello
		if err := wire.NewConn(c).Call("hello", nil, &h); err != nil {
			done <- err
			return
		}
		if h.Instance != in.id {
			done <- fmt.Errorf("answered as instance %q", h.Instance)
			return
		}
		in.daemonPID = instanceDaemonPID(in.cmd.Process.Pid, h)
		done <- nil
	}()
	timer := time.NewTimer(def.ReadyTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		select {
		case <-in.exited:
			return d.initFailed(in, def)
		case <-time.After(100 * time.Millisecond):
		}
		// The hello waits in the listen queue until no daemon has answered by the ready
		// deadline: its timeout is the ready timer's, which it may beat by a moment.
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return d.neverReady(in, def)
		}
		return wire.Errorf(wire.CodeInternal, "definition", "definition %s: instance daemon did not become ready: %v%s", def.Name, err, d.logTail(in))
	case <-in.exited:
		return d.initFailed(in, def)
	case <-timer.C:
		return d.neverReady(in, def)
	}
}

func (d *Daemon) neverReady(in *instance, def config.Definition) error {
	return wire.Errorf(wire.CodeInternal, "definition", "definition %s: instance never became ready within %s (ready_timeout); the init must run the instance daemon with descriptor 3 open%s", def.Name, def.ReadyTimeout, d.logTail(in))
}

func (d *Daemon) initFailed(in *instance, def config.Definition) error {
	return wire.Errorf(wire.CodeInternal, "definition", "definition %s: init exited (%s) before the instance was ready%s", def.Name, in.cmd.ProcessState, d.logTail(in))
}

func (d *Daemon) logTail(in *instance) string {
	b, _ := os.ReadFile(filepath.Join(in.state, "daemon.log"))
	b = bytes.TrimSpace(b)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	if len(b) == 0 {
		return ""
	}
	return "; its output: " + string(b)
}

// watch holds a connection to the instance daemon, on which it hears of every terminal's exit,
// and marks the instance invalid for good when that daemon exits or its init does; whatever is
// left of the instance's process group is killed, and of the groups of its terminals that
// still ran (orphans.go).
func (d *Daemon) watch(in *instance) {
	if c, err := net.Dial("unix", in.sock); err == nil {
		defer c.Close()
		go func() {
			defer close(in.heard)
			wc := wire.NewConn(c)
			if wc.Call("watch", nil, nil) != nil {
				return
			}
			for {
				var ev wire.Exited
				if wc.Recv(&ev) != nil {
					return
				}
				d.terminalExited(in, ev.ID)
			}
		}()
	} else {
		close(in.heard)
	}
	select {
	case <-in.exited:
	case <-in.heard:
	}
	d.mu.Lock()
	was, destroying := in.valid, in.destroying
	in.valid = false
	d.mu.Unlock()
	d.pool.drop(in.sock)
	if destroying {
		return
	}
	_ = syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
	<-in.exited
	d.killOrphans(in)
	if was {
		d.log.Warn("instance daemon exited; instance is invalid", "instance", in.id, "state", in.cmd.ProcessState.String())
	}
	d.cleanupFiles(in, d.cfg.Definitions[in.def])
}

// destroy ends an instance: its daemon ends its terminals, then the process group is killed,
// the definition's cleanup runs and the socket this daemon bound is removed.
func (d *Daemon) destroy(in *instance) {
	d.mu.Lock()
	first := markDestroying(in)
	d.mu.Unlock()
	if first {
		d.teardown(in)
	}
}

// markDestroying marks in as being destroyed, under d.mu: no start is served in it from then
// on. It reports false if in already was.
func markDestroying(in *instance) bool {
	if in.destroying {
		return false
	}
	in.destroying, in.valid = true, false
	return true
}

// teardown is destroy's work, once in was marked.
func (d *Daemon) teardown(in *instance) {
	if in.cmd != nil {
		if c, err := net.DialTimeout("unix", in.sock, time.Second); err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_ = wire.NewConn(c).Call("shutdown", nil, nil)
			c.Close()
		}
		select {
		case <-in.exited:
		case <-time.After(3 * time.Second):
			_ = syscall.Kill(-in.cmd.Process.Pid, syscall.SIGKILL)
			<-in.exited
		}
		d.killOrphans(in)
	}
	d.pool.drop(in.sock)
	d.cleanupFiles(in, d.cfg.Definitions[in.def])
	_ = os.RemoveAll(in.state)
	d.mu.Lock()
	delete(d.instances, in.id)
	for name, tr := range d.terms {
		if tr.inst == in.id {
			delete(d.terms, name)
		}
	}
	d.mu.Unlock()
}

// cleanupFiles runs the definition's cleanup program and removes what this daemon created.
func (d *Daemon) cleanupFiles(in *instance, def config.Definition) {
	d.mu.Lock()
	done := in.cleaned
	in.cleaned = true
	d.mu.Unlock()
	if done {
		return
	}
	if len(def.Cleanup) > 0 {
		cmd := exec.Command(def.Cleanup[0], def.Cleanup[1:]...)
		cmd.Env = append(instanceEnv(), "KURUWA_INSTANCE="+in.id, "KURUWA_INSTANCE_NAME="+in.name)
		if out, err := cmd.CombinedOutput(); err != nil {
			d.log.Warn("cleanup failed", "instance", in.id, "err", err, "output", string(out))
		}
	}
	_ = os.RemoveAll(filepath.Dir(in.sock))
}
