package shutdown

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Sequence is the way down. Nil function fields are skipped.
type Sequence struct {
	StopServices func()
	// KillAll signals every process but init (kill(-1, sig)). Leave it nil unless init is PID 1:
	// anywhere else kill(-1) reaches every process of the user.
	KillAll func(sig unix.Signal) error
	// Settled reports that no process is left (Reaper.Idle).
	Settled func() bool
	Sync    func()
	Unmount func(target string, flags int) error
	// Mounts are unmounted last first.
	Mounts []string

	KillWait time.Duration // after SIGTERM to all, before SIGKILL; default 3 s
	Timeout  time.Duration // bound on sync and on each unmount; default 5 s
}

// Run goes down the sequence and returns everything that went wrong; it never hangs longer than
// its bounds (a stuck sync or unmount is left behind in its goroutine).
func (s Sequence) Run() error {
	killWait, timeout := or(s.KillWait, 3*time.Second), or(s.Timeout, 5*time.Second)
	var errs []error
	if s.StopServices != nil {
		s.StopServices()
	}
	if s.KillAll != nil {
		errs = append(errs, s.killAll(killWait))
	}
	if s.Sync != nil {
		errs = append(errs, bounded("sync", timeout, func() error { s.Sync(); return nil }))
	}
	for i := len(s.Mounts) - 1; i >= 0 && s.Unmount != nil; i-- {
		errs = append(errs, bounded("unmount "+s.Mounts[i], timeout, func() error { return s.unmount(s.Mounts[i]) }))
	}
	return errors.Join(errs...)
}

func (s Sequence) killAll(wait time.Duration) error {
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		if err := s.KillAll(sig); errors.Is(err, unix.ESRCH) {
			return nil // nobody left to signal
		} else if err != nil {
			return fmt.Errorf("kill -%d -1: %w", sig, err)
		}
		if s.settle(wait) {
			return nil
		}
	}
	return errors.New("processes are left after SIGKILL")
}

func (s Sequence) settle(wait time.Duration) bool {
	if s.Settled == nil {
		return false
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if s.Settled() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// unmount detaches lazily when a plain unmount fails (a busy /dev while init holds the console).
func (s Sequence) unmount(target string) error {
	err := s.Unmount(target, 0)
	if err == nil {
		return nil
	}
	if lerr := s.Unmount(target, unix.MNT_DETACH); lerr != nil {
		return fmt.Errorf("%w; lazy: %w", err, lerr)
	}
	return nil
}

func bounded(what string, d time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("%s: not done after %v; going on", what, d)
	}
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
