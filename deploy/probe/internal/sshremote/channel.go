package sshremote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/internal/rpc"
)

// Channel is ssh_remote as one of the Probe's channel supervisors: the Probe hands it every
// Worker Sandbox it adopts (and takes it back when the sandbox stops or its DevBox moves), and a
// login for AGENT+SESSION reaches the sandbox that has that session. A fenced session refuses
// the channel's runs like any other run (the appliance checks), so fencing needs nothing here.
type Channel struct {
	srv *Server

	mu     sync.Mutex
	boxes  map[string]*attached // by DevBox
	served map[string]string    // "agent/session" → the DevBox whose sandbox has it
}

// attached is one Attach of a sandbox: each ends on its own.
type attached struct{ sb probe.Sandbox }

// NewChannel makes the channel's SSH endpoint from cfg; cfg.Appliance is the channel's own.
func NewChannel(cfg Config) (*Channel, error) {
	c := &Channel{boxes: map[string]*attached{}, served: map[string]string{}}
	cfg.Appliance = c.appliance
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	c.srv = srv
	return c, nil
}

// Server is the channel's SSH endpoint, to Serve on a listener.
func (c *Channel) Server() *Server { return c.srv }

// Name is the channel's name in the Probe's capabilities.
func (c *Channel) Name() string { return "ssh_remote" }

// Attach serves logins to the sessions of devbox's sandbox until ctx ends.
func (c *Channel) Attach(ctx context.Context, devbox string, sb probe.Sandbox, _ func(probe.Fault)) {
	a := &attached{sb}
	c.mu.Lock()
	c.boxes[devbox] = a
	c.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-sb.Done():
		}
		c.mu.Lock()
		if c.boxes[devbox] == a { // not a later Attach of the same sandbox (a re-issued boot adopts it again)
			delete(c.boxes, devbox)
		}
		c.mu.Unlock()
	}()
}

// DevBoxOf names the DevBox whose sandbox served agent's session last ("" if none did).
func (c *Channel) DevBoxOf(agent, session string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served[agent+"/"+session]
}

// appliance finds the sandbox that has agent's session.
func (c *Channel) appliance(agent, session string) (Appliance, error) {
	c.mu.Lock()
	names := make([]string, 0, len(c.boxes))
	boxes := make([]probe.Sandbox, 0, len(c.boxes))
	for name, a := range c.boxes {
		names, boxes = append(names, name), append(boxes, a.sb)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, sb := range boxes {
		client := rpc.NewClient(sb.Endpoint(), sb.Token(), &http.Client{Transport: &http.Transport{Proxy: nil}})
		var s rpc.Session
		err := client.Call(ctx, rpc.ActionSessionGet, map[string]any{"agent_id": agent, "session_id": session}, &s)
		var re *rpc.Error
		switch {
		case err == nil:
			c.mu.Lock()
			c.served[agent+"/"+session] = names[i]
			c.mu.Unlock()
			return client, nil
		case errors.As(err, &re) && re.Code == rpc.CodeNotFound:
			continue
		default:
			return nil, fmt.Errorf("a sandbox of this Probe did not answer: %w", err)
		}
	}
	return nil, fmt.Errorf("no Worker Sandbox of this Probe has session %s of agent %s", session, agent)
}
