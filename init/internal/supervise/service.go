package supervise

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allox-os/allox/internal/manifest"
	"golang.org/x/sys/unix"
)

// killWait bounds the wait for a service to end after SIGKILL (a process stuck in the kernel).
const killWait = 3 * time.Second

// service is the state of one supervised service.
type service struct {
	sup  *Supervisor
	spec manifest.Service
	deps []*service

	mu        sync.Mutex
	proc      *os.Process // the running process, nil between runs
	launched  atomic.Bool // run has been called
	started   atomic.Bool // a process has been started at least once
	kick      chan struct{}
	ready     chan struct{} // closed when readiness is decided
	readyOnce sync.Once
	readyOK   bool          // written before ready is closed
	done      chan struct{} // closed when run returns
}

func newService(s *Supervisor, spec manifest.Service) *service {
	return &service{
		sup: s, spec: spec,
		kick:  make(chan struct{}, 1),
		ready: make(chan struct{}),
		done:  make(chan struct{}),
	}
}

func (v *service) emit(e Event) {
	e.Service = v.spec.Name
	v.sup.emit(e)
}

// run is the service's life: wait for dependencies, then start, wait, restart per policy.
func (v *service) run() {
	defer close(v.done)
	if !v.waitDeps() {
		v.decide(false, nil)
		return
	}
	go v.watchReady()
	var delay time.Duration
	for n := 0; !v.sup.isStopping(); n++ {
		began := time.Now()
		status := v.runOnce()
		v.emit(Event{Kind: Exited, Status: status})
		if v.sup.isStopping() {
			return
		}
		again := restarts(v.spec.Restart, status)
		if again && v.spec.MaxRestarts > 0 && n >= v.spec.MaxRestarts {
			again = false
			v.emit(Event{Kind: Warning, Status: status, Err: fmt.Errorf("%w: restarted %d times, the most max_restarts allows", ErrRestartBudget, n)})
		}
		if !again {
			if !v.isReady() {
				v.decide(false, fmt.Errorf("ended with status %d before %s", status, v.readyText()))
			}
			v.emit(Event{Kind: Done, Status: status, Critical: v.spec.Critical})
			if v.spec.Critical {
				v.sup.critical <- v.spec.Name
			}
			return
		}
		delay = v.sup.cfg.Backoff.next(delay, time.Since(began))
		v.emit(Event{Kind: Restarting, Delay: delay})
		select {
		case <-time.After(delay):
		case <-v.sup.stopping:
			return
		}
	}
}

// waitDeps waits for every dependency's readiness decision; false when stopping meanwhile.
func (v *service) waitDeps() bool {
	for _, d := range v.deps {
		select {
		case <-d.ready:
			if !d.readyOK {
				v.emit(Event{Kind: Warning, Err: fmt.Errorf("dependency %s is not ready; starting anyway", d.spec.Name)})
			}
		case <-v.sup.stopping:
			return false
		}
	}
	return true
}

// runOnce starts the process and waits for it; a start failure counts as status 127.
func (v *service) runOnce() int {
	proc, exit, outDone, err := v.spawn()
	if err != nil {
		v.emit(Event{Kind: StartFailed, Err: err})
		return 127
	}
	v.setProc(proc)
	v.started.Store(true)
	v.emit(Event{Kind: Started, PID: proc.Pid})
	if v.spec.Ready == nil {
		v.decide(true, nil) // ready once started
	}
	select { // re-check readiness now
	case v.kick <- struct{}{}:
	default:
	}
	ws := <-exit
	v.setProc(nil)
	proc.Release()
	select { // let the last output lines reach the console before the exit is reported
	case <-outDone:
	case <-time.After(200 * time.Millisecond):
	}
	return ExitStatus(ws)
}

func (v *service) setProc(p *os.Process) {
	v.mu.Lock()
	v.proc = p
	v.mu.Unlock()
}

func (v *service) signal(sig unix.Signal, group bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.proc == nil {
		return
	}
	if group { // services run in their own session: the group holds their helpers
		unix.Kill(-v.proc.Pid, sig)
	}
	v.proc.Signal(sig)
}

// terminate stops the service; run must return (done) within the bounds.
func (v *service) terminate(timeout time.Duration) {
	if v.launched.CompareAndSwap(false, true) { // never started: now it never will
		return
	}
	v.signal(unix.SIGTERM, false)
	select {
	case <-v.done:
		return
	case <-time.After(timeout):
	}
	v.emit(Event{Kind: Warning, Err: fmt.Errorf("still running %v after SIGTERM; sending SIGKILL", timeout)})
	v.signal(unix.SIGKILL, true)
	select {
	case <-v.done:
	case <-time.After(killWait):
		v.emit(Event{Kind: Warning, Err: fmt.Errorf("still running %v after SIGKILL", killWait)})
	}
}
