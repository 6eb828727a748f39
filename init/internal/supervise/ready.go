package supervise

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The readiness check is polled at most readyMaxDelay apart: the boot waits on the first check
// that passes, and a doubling backoff up to a second put up to half the daemon's start time on
// the path to ready (a daemon listening 320 ms after its start was seen at 630 ms). A refused
// connect to a local port costs microseconds, so 50 checks a second while a service starts cost
// nothing that shows.
const (
	readyFirstDelay = 5 * time.Millisecond
	readyMaxDelay   = 20 * time.Millisecond
	dialTimeout     = 500 * time.Millisecond
)

// watchReady polls the readiness check with a bounded backoff until it passes, ReadyTimeout
// passes, or the supervisor stops. Each start of the process re-checks at once.
func (v *service) watchReady() {
	deadline := time.NewTimer(v.sup.cfg.ReadyTimeout)
	defer deadline.Stop()
	delay := readyFirstDelay
	for {
		if v.isReady() {
			v.decide(true, nil)
			return
		}
		select {
		case <-v.ready: // decided elsewhere: the service ended for good
			return
		case <-v.sup.stopping:
			v.decide(false, nil)
			return
		case <-deadline.C:
			v.decide(false, fmt.Errorf("%s not ready after %v", v.readyText(), v.sup.cfg.ReadyTimeout))
			return
		case <-v.kick:
		case <-time.After(delay):
			delay = min(delay*2, readyMaxDelay)
		}
	}
}

// decide records readiness once and reports it (err nil and !ok: stopped, nothing to report).
// The event goes out before ready closes, so that Booted follows every Ready event.
func (v *service) decide(ok bool, err error) {
	v.readyOnce.Do(func() {
		switch {
		case ok:
			v.emit(Event{Kind: Ready})
		case err != nil:
			v.emit(Event{Kind: NotReady, Err: err})
		}
		v.readyOK = ok
		close(v.ready)
	})
}

func (v *service) isReady() bool {
	if !v.started.Load() {
		return false
	}
	r := v.spec.Ready
	switch {
	case r == nil:
		return true
	case r.TCP != "":
		c, err := net.DialTimeout("tcp", r.TCP, dialTimeout)
		if err != nil {
			return false
		}
		c.Close()
		return true
	default:
		_, err := os.Stat(filepath.Join(v.sup.cfg.Root, r.Path))
		return err == nil
	}
}

func (v *service) readyText() string {
	switch r := v.spec.Ready; {
	case r == nil:
		return "start"
	case r.TCP != "":
		return "tcp " + r.TCP
	default:
		return "path " + r.Path
	}
}
