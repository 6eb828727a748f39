// Package vm boots a QEMU VM from a Go test, in the style of hugelgupf/vmtest: it streams the
// console (the serial port, or Kata's virtio console hvc0: see Console) to t.Logf and keeps it in a file, waits for console markers, forwards guest TCP
// ports to 127.0.0.1, prints a command line that reproduces the boot when the test fails, and fails
// a test that neither waited for nor killed its VM. It uses KVM when /dev/kvm really works and
// falls back to TCG otherwise, with TimeoutScale for the timeouts.
package vm

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// VM is a running (or exited) QEMU process.
type VM struct {
	t       TB
	name    string
	opt     Options
	argv    []string
	hostFwd map[int]int
	ctx     context.Context
	cmd     *exec.Cmd
	started time.Time
	console *console
	out     *outputs

	done    chan struct{} // closed once QEMU has exited and its output is drained
	exitErr error         // set before done is closed

	mu             sync.Mutex
	waited, killed bool
}

var vmCount atomic.Int32

// TB is what the harness needs from its caller: *testing.T and *testing.B satisfy it, and so does
// the small runner behind `make boot` (cmd/allox-boot).
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Failed() bool
}

// Start boots a VM. ctx bounds its life: when ctx is done, QEMU is killed. Every VM must end with
// Wait or Kill before the test ends, or the test fails.
func Start(ctx context.Context, t TB, opt Options) (*VM, error) {
	t.Helper()
	if opt.Accel == "" {
		opt.Accel = Accel()
	}
	opt = opt.withDefaults()
	if err := opt.validate(); err != nil {
		return nil, err
	}
	hostFwd, err := resolveHostFwd(opt.HostFwd)
	if err != nil {
		return nil, err
	}
	v := &VM{
		t: t, name: fmt.Sprintf("vm%d", vmCount.Add(1)), opt: opt, hostFwd: hostFwd, ctx: ctx,
		console: newConsole(), done: make(chan struct{}),
	}
	if v.out, err = openOutputs(t.Name()); err != nil {
		return nil, err
	}
	fwCfg, err := v.out.writeFwCfg(opt.FwCfg)
	if err == nil {
		v.argv = append([]string{opt.QEMU}, opt.args(hostFwd, fwCfg)...)
		err = v.out.writeReproducer(t.Name(), v.CommandLine())
	}
	if err != nil {
		v.out.close()
		v.out.remove()
		return nil, err
	}
	if err := v.start(); err != nil {
		v.out.close()
		v.out.remove()
		return nil, err
	}
	t.Cleanup(v.cleanup)
	return v, nil
}

func (v *VM) start() error {
	if v.opt.DetachDir != "" {
		return v.startDetached()
	}
	consoleR, consoleW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("console pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		consoleR.Close()
		consoleW.Close()
		return fmt.Errorf("stderr pipe: %w", err)
	}
	v.cmd = exec.CommandContext(v.ctx, v.argv[0], v.argv[1:]...)
	v.cmd.Stdout, v.cmd.Stderr = consoleW, stderrW // stdin is /dev/null
	err = v.launch()
	consoleW.Close()
	stderrW.Close()
	if err != nil {
		consoleR.Close()
		stderrR.Close()
		return err
	}
	v.readOutputs(consoleR, stderrR, nil)
	return nil
}

func (v *VM) launch() error {
	why := ""
	if v.opt.Accel == Accel() {
		why = " (" + AccelReason() + ")"
	}
	v.t.Logf("%s: accel %s%s; console and reproducer in %s\n%s", v.name, v.opt.Accel, why, v.out.dir, v.CommandLine())
	v.started = time.Now()
	if err := v.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w (install it: apt-get install qemu-system-x86)", v.argv[0], err)
	}
	return nil
}

// startDetached starts QEMU in its own process group writing into files of DetachDir, and tails them.
func (v *VM) startDetached() error {
	var files [2]*os.File
	for i, name := range []string{DetachConsole, DetachStderr} {
		f, err := os.OpenFile(filepath.Join(v.opt.DetachDir, name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			for _, g := range files[:i] {
				g.Close()
			}
			return fmt.Errorf("detached qemu: %w", err)
		}
		files[i] = f
	}
	v.cmd = exec.CommandContext(v.ctx, v.argv[0], v.argv[1:]...)
	v.cmd.Stdout, v.cmd.Stderr = files[0], files[1]
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a signal to this process's group is not QEMU's
	err := v.launch()
	files[0].Close()
	files[1].Close()
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	var readers [2]*os.File
	for i, name := range []string{DetachConsole, DetachStderr} {
		if readers[i], err = os.Open(filepath.Join(v.opt.DetachDir, name)); err != nil {
			v.cmd.Process.Kill()
			v.cmd.Wait()
			return fmt.Errorf("detached qemu: %w", err)
		}
	}
	v.readOutputs(&tail{f: readers[0], exited: exited}, &tail{f: readers[1], exited: exited}, exited)
	return nil
}

// tail reads a file another process appends to, until that process has exited and the file is read.
type tail struct {
	f      *os.File
	exited <-chan struct{}
}

func (t *tail) Read(p []byte) (int, error) {
	for {
		n, err := t.f.Read(p)
		if n > 0 || err != io.EOF {
			return n, err
		}
		select {
		case <-t.exited:
			return t.f.Read(p) // what was written before the exit, then EOF
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (t *tail) Close() error { return t.f.Close() }

// readOutputs streams the console and stderr; exited (detached QEMU only) is closed once QEMU has exited.
func (v *VM) readOutputs(consoleR, stderrR io.ReadCloser, exited chan struct{}) {
	consoleDone, stderrDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(consoleDone)
		defer v.console.end()
		readLines(consoleR, v.consoleLine)
	}()
	go func() {
		defer close(stderrDone)
		readLines(stderrR, v.stderrLine)
	}()
	go v.reap(consoleR, consoleDone, stderrR, stderrDone, exited)
}

// Pid is QEMU's process id.
func (v *VM) Pid() int { return v.cmd.Process.Pid }

func (v *VM) consoleLine(text string) {
	at := time.Since(v.started)
	v.console.add(Line{Text: text, At: at})
	v.out.console(at, text)
	v.t.Logf("%s %8.3fs | %s", v.name, at.Seconds(), text)
}

func (v *VM) stderrLine(text string) {
	v.out.stderr(text)
	v.t.Logf("%s qemu: %s", v.name, text)
}

// reap waits for QEMU, then for its output to drain; a grandchild holding a pipe open gets 5 s.
func (v *VM) reap(consoleR io.ReadCloser, consoleDone chan struct{}, stderrR io.ReadCloser, stderrDone chan struct{}, exited chan struct{}) {
	err := v.cmd.Wait()
	if exited != nil {
		close(exited)
	}
	for _, p := range []struct {
		r    io.ReadCloser
		done chan struct{}
	}{{consoleR, consoleDone}, {stderrR, stderrDone}} {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.r.Close()
			<-p.done
		}
		p.r.Close()
	}
	v.exitErr = err
	v.out.close()
	close(v.done)
}

// Wait waits for QEMU to exit (the guest powered off) and returns nil if it exited with status 0.
func (v *VM) Wait() error {
	v.mu.Lock()
	v.waited = true
	v.mu.Unlock()
	<-v.done
	if v.exitErr == nil {
		return nil
	}
	return fmt.Errorf("%s: %s\n%s", v.name, v.exitDescription(), v.out.stderrTail(20))
}

// Kill stops QEMU at once and waits for it to be gone.
func (v *VM) Kill() {
	v.mu.Lock()
	v.killed = true
	v.mu.Unlock()
	select {
	case <-v.done:
		return
	default:
	}
	_ = v.cmd.Process.Kill() // fails only if it already exited
	<-v.done
}

// exitDescription says how QEMU ended; call it only after done is closed.
func (v *VM) exitDescription() string {
	switch {
	case v.exitErr == nil:
		return "qemu exited with status 0"
	case v.ctx.Err() != nil:
		return fmt.Sprintf("qemu killed as its context ended (%v): %v", context.Cause(v.ctx), v.exitErr)
	default:
		return "qemu: " + v.exitErr.Error()
	}
}

// HostPort is the 127.0.0.1 port forwarded to guest TCP port guest, or 0 if none is.
func (v *VM) HostPort(guest int) int { return v.hostFwd[guest] }

// CommandLine is the QEMU command line, shell-quoted, that reproduces this boot.
func (v *VM) CommandLine() string {
	q := make([]string, len(v.argv))
	for i, a := range v.argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// Uptime is the time since QEMU was started.
func (v *VM) Uptime() time.Duration { return time.Since(v.started) }

func (v *VM) cleanup() {
	v.mu.Lock()
	handled := v.waited || v.killed
	v.mu.Unlock()
	if !handled {
		if v.t.Failed() {
			v.t.Logf("%s: killing QEMU (pid %d) left running by the failed test", v.name, v.cmd.Process.Pid)
		} else {
			v.t.Errorf("%s: QEMU (pid %d) was neither waited for nor killed: end every vm.Start with vm.Wait() (after the guest powers off) or vm.Kill()", v.name, v.cmd.Process.Pid)
		}
		v.Kill()
	}
	<-v.done
	if v.t.Failed() {
		v.t.Logf("%s: reproduce this boot with:\n  %s\nconsole log: %s", v.name, v.CommandLine(), v.out.consolePath())
		return
	}
	v.out.remove()
}
