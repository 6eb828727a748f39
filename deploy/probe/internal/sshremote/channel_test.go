package sshremote

import (
	"context"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

type stillSandbox struct{ done chan struct{} }

func (s stillSandbox) Endpoint() string               { return "http://127.0.0.1:1" }
func (s stillSandbox) Token() string                  { return "" }
func (s stillSandbox) Done() <-chan struct{}          { return s.done }
func (s stillSandbox) Stop(ctx context.Context) error { return nil }

// The Probe attaches a sandbox again when it re-adopts it (a boot under a new epoch) and then
// ends the earlier attachment: the sandbox stays served. Once the latest ends, it is not.
func TestChannelReattachKeepsTheSandbox(t *testing.T) {
	c, err := NewChannel(Config{HostKey: newSigner(t), UserCAs: []ssh.PublicKey{newSigner(t).PublicKey()}})
	must(t, err)
	sb := stillSandbox{done: make(chan struct{})}
	first, endFirst := context.WithCancel(context.Background())
	c.Attach(first, "box", sb, nil)
	second, endSecond := context.WithCancel(context.Background())
	c.Attach(second, "box", sb, nil)
	endFirst()
	time.Sleep(100 * time.Millisecond) // the first attachment's watcher has run
	if !c.attached("box") {
		t.Fatal("ending the earlier attachment detached the re-adopted sandbox")
	}
	endSecond()
	for deadline := time.Now().Add(5 * time.Second); c.attached("box"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox is still served after its last attachment ended")
		}
	}
}

func (c *Channel) attached(devbox string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.boxes[devbox]
	return ok
}
