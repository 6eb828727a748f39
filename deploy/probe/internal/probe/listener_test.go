package probe

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A listener whose address another program took when it broke cannot be rebound: each rebind is
// backed off and counted, and the last allowed one escalates and leaves the channel down (real
// sockets; the broken listener is the test's serve function).
func TestServeListenerEscalatesWhenAddressTaken(t *testing.T) {
	p := New(Config{Host: "h", Supervise: 5 * time.Millisecond, Heal: HealPolicy{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}},
		&fakeGateway{}, NewHostRuntime(nil))
	hold(t, p)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var taken net.Listener
	serves := 0
	serve := func(l net.Listener) error {
		serves++
		l.Close()
		if taken, err = net.Listen("tcp", l.Addr().String()); err != nil { // another program has the port now
			t.Errorf("take the port: %v", err)
		}
		return errors.New("accept: invalid argument")
	}
	done := make(chan struct{})
	go func() { defer close(done); p.ServeListener(t.Context(), "ssh_remote", ln, serve, nil) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeListener still rebinding an address that is taken")
	}
	defer taken.Close()
	c := p.heal.Counts()
	if serves != 1 || c["listener_lost retrying"] != 2 || c["listener_lost escalated"] != 1 || c["listener_lost recovered"] != 0 {
		t.Errorf("served %d times, counters %v: want 2 retries then one escalation, nothing served again", serves, c)
	}
}
