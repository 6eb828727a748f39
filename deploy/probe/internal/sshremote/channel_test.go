package sshremote

import (
	"context"
	"testing"
	"time"
)

type idleSandbox struct{ done chan struct{} }

func (s idleSandbox) Endpoint() string               { return "http://127.0.0.1:1" }
func (s idleSandbox) Token() string                  { return "t" }
func (s idleSandbox) Done() <-chan struct{}          { return s.done }
func (s idleSandbox) Stop(ctx context.Context) error { return nil }

// A boot re-issued under a new epoch adopts the same running sandbox again: the Probe attaches it
// a second time and ends the first attachment. The channel must keep serving it (it once dropped
// it, and every SSH login then failed with "no Worker Sandbox of this Probe has session").
func TestChannelKeepsASandboxAttachedAgain(t *testing.T) {
	c := &Channel{boxes: map[string]*attached{}, served: map[string]string{}}
	sb := idleSandbox{done: make(chan struct{})}
	first, endFirst := context.WithCancel(t.Context())
	c.Attach(first, "box", sb, nil)
	c.Attach(t.Context(), "box", sb, nil)
	endFirst()
	time.Sleep(100 * time.Millisecond) // the first attachment's watcher runs
	c.mu.Lock()
	_, ok := c.boxes["box"]
	c.mu.Unlock()
	if !ok {
		t.Fatal("the sandbox attached again was dropped when its first attachment ended")
	}
	close(sb.done)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		_, ok = c.boxes["box"]
		c.mu.Unlock()
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox stayed attached after it ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
