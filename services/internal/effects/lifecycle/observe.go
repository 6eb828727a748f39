package lifecycle

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// observer is the running observer process of one run, driven over its stdin/stdout with one JSON
// request and one JSON answer per line.
type observer struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	stderr  *strings.Builder
	exited  chan struct{} // closed when the process has exited
	waitErr error
	closing bool        // set before a deliberate close: its exit is not a fault
	onExit  func(error) // called if the process exits before close was asked for; nil in standby
	mu      sync.Mutex
}

type request struct {
	Op    string   `json:"op"`
	Point string   `json:"point,omitempty"`
	Args  []string `json:"args,omitempty"` // begin: the run's command line
}

type answer struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// startObserver starts prog with args.
func startObserver(prog *program, args []string) (*observer, error) {
	cmd := exec.Command(prog.Path(), args...)
	cmd.Args[0] = ObserveProgram
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{b: &stderr, max: 64 << 10}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", ObserveProgram, err)
	}
	o := &observer{cmd: cmd, in: in, out: bufio.NewReader(out), stderr: &stderr, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		o.mu.Lock()
		o.waitErr = err
		deliberate, onExit := o.closing, o.onExit
		o.mu.Unlock()
		close(o.exited)
		if !deliberate && onExit != nil {
			onExit(o.exitError())
		}
	}()
	return o, nil
}

// begin hands a standby observer its run: the command line, and onExit, called (once, from
// another goroutine) if the process exits before close was asked for, a fault during the run.
func (o *observer) begin(args []string, onExit func(error), timeout time.Duration) error {
	if err := o.call(request{Op: "begin", Args: args}, timeout); err != nil {
		return err
	}
	o.mu.Lock()
	o.onExit = onExit
	o.mu.Unlock()
	if o.hasExited() { // between its answer and onExit: a fault all the same
		return fmt.Errorf("observer begin: %w", o.exitError())
	}
	return nil
}

func (o *observer) hasExited() bool {
	select {
	case <-o.exited:
		return true
	default:
		return false
	}
}

func (o *observer) exitError() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	msg := strings.TrimSpace(o.stderr.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	err := o.waitErr
	if err == nil {
		err = errors.New("exited")
	}
	if msg != "" {
		return fmt.Errorf("observer %w: %s", err, msg)
	}
	return fmt.Errorf("observer %w", err)
}

// call sends one request and waits for its answer, the process's death, or the timeout.
func (o *observer) call(req request, timeout time.Duration) error {
	b, _ := json.Marshal(req)
	if _, err := o.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("observer %s: %w", req.Op, o.exitErrorOr(err))
	}
	type result struct {
		line string
		err  error
	}
	got := make(chan result, 1)
	go func() { l, err := o.out.ReadString('\n'); got <- result{l, err} }()
	select {
	case r := <-got:
		if r.err != nil {
			return fmt.Errorf("observer %s %s: %w", req.Op, req.Point, o.exitErrorOr(r.err))
		}
		var a answer
		if err := json.Unmarshal([]byte(r.line), &a); err != nil {
			return fmt.Errorf("observer %s %s: bad answer %q: %w", req.Op, req.Point, strings.TrimSpace(r.line), err)
		}
		if !a.OK {
			return fmt.Errorf("observer %s %s: %s", req.Op, req.Point, a.Error)
		}
		return nil
	case <-time.After(timeout):
		o.kill()
		return fmt.Errorf("observer %s %s: no answer in %s; killed", req.Op, req.Point, timeout)
	}
}

func (o *observer) exitErrorOr(err error) error {
	select {
	case <-o.exited:
		return o.exitError()
	case <-time.After(time.Second):
		return err
	}
}

// close asks the observer to close the evidence set and waits for it to exit successfully.
func (o *observer) close(timeout time.Duration) error {
	o.mu.Lock()
	o.closing = true
	o.mu.Unlock()
	if err := o.call(request{Op: "close"}, timeout); err != nil {
		return err
	}
	o.in.Close()
	select {
	case <-o.exited:
	case <-time.After(timeout):
		o.kill()
		return fmt.Errorf("observer did not exit %s after closing the evidence set; killed", timeout)
	}
	if o.waitErr != nil {
		return o.exitError()
	}
	return nil
}

// kill ends the observer at once (a fault path, or observer.abort).
func (o *observer) kill() {
	_ = o.cmd.Process.Kill()
}

// abandon kills the observer without reporting its exit as a new fault.
func (o *observer) abandon() {
	o.mu.Lock()
	o.closing = true
	o.mu.Unlock()
	o.kill()
	<-o.exited
}

type limitedWriter struct {
	mu  sync.Mutex
	b   *strings.Builder
	max int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.b.Len(); room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
