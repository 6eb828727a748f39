package wire

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
)

// ErrRefused is a Gateway's refusal: its Error says why. Use errors.As.
type ErrRefused struct {
	Status int
	Body   Error
}

func (e *ErrRefused) Error() string {
	return fmt.Sprintf("gateway refused (%d %s): %s", e.Status, e.Body.Code, e.Body.Message)
}

// Is makes a "lease_lost" refusal match lease.ErrLost.
func (e *ErrRefused) Is(target error) bool {
	return target == lease.ErrLost && e.Body.Code == "lease_lost"
}

// conn calls one of several Gateway replicas, staying on the last that answered.
type conn struct {
	http      *http.Client
	endpoints []string
	mu        sync.Mutex
	cur       int
}

func newConn(endpoints []string, tc *tls.Config) (*conn, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("--gateway: name at least one Gateway URL, e.g. https://127.0.0.1:7443")
	}
	for _, e := range endpoints {
		if u, err := url.Parse(e); err != nil || u.Scheme != "https" {
			return nil, fmt.Errorf("--gateway %q: use an https:// URL (the Gateway speaks only mutual TLS)", e)
		}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}
	return &conn{http: &http.Client{Transport: tr}, endpoints: endpoints}, nil
}

// do sends method path with body to a replica; on a transport failure it tries the next.
func (c *conn) do(ctx context.Context, method, path, trace string, body, out any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	c.mu.Lock()
	start := c.cur
	c.mu.Unlock()
	var lastErr error
	for i := range c.endpoints {
		n := (start + i) % len(c.endpoints)
		err := c.once(ctx, c.endpoints[n]+path, method, trace, b, out)
		var ref *ErrRefused
		if err == nil || errors.As(err, &ref) && ref.Status != http.StatusServiceUnavailable || ctx.Err() != nil {
			c.mu.Lock()
			c.cur = n
			c.mu.Unlock()
			return err
		}
		lastErr = err
	}
	return lastErr
}

func (c *conn) once(ctx context.Context, u, method, trace string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if trace != "" {
		req.Header.Set(HeaderTrace, trace)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		ref := &ErrRefused{Status: resp.StatusCode}
		if json.Unmarshal(data, &ref.Body) != nil {
			ref.Body = Error{Code: "http", Message: strings.TrimSpace(string(data))}
		}
		return ref
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// ProbeClient is all a Probe can ask of the Gateway: register, heartbeat, pull intents, report
// events. It has no way to write a spec, a placement or a policy, and the Gateway refuses a
// probe certificate on every other path.
type ProbeClient struct {
	c    *conn
	Host string
}

// NewProbeClient returns the client of host for the Gateway replicas at endpoints.
func NewProbeClient(host string, endpoints []string, tc *tls.Config) (*ProbeClient, error) {
	c, err := newConn(endpoints, tc)
	if err != nil {
		return nil, err
	}
	return &ProbeClient{c: c, Host: host}, nil
}

// Register asks for a lease with a new epoch.
func (p *ProbeClient) Register(ctx context.Context, reg Register) (lease.Grant, error) {
	var g lease.Grant
	err := p.c.do(ctx, http.MethodPost, PathRegister, NewTraceID(), reg, &g)
	return g, err
}

// Heartbeat renews the lease; lease.ErrLost matches when the Gateway no longer holds it.
func (p *ProbeClient) Heartbeat(ctx context.Context, hb Heartbeat) (lease.Grant, error) {
	var g lease.Grant
	err := p.c.do(ctx, http.MethodPost, PathHeartbeat, NewTraceID(), hb, &g)
	return g, err
}

// Pull long-polls the pending intents of epoch.
func (p *ProbeClient) Pull(ctx context.Context, epoch, after int64, wait time.Duration) (Intents, error) {
	var in Intents
	q := struct {
		Host  string        `json:"host"`
		Epoch int64         `json:"epoch"`
		After int64         `json:"after"`
		Wait  time.Duration `json:"wait"`
	}{p.Host, epoch, after, wait}
	err := p.c.do(ctx, http.MethodPost, PathIntents, NewTraceID(), q, &in)
	return in, err
}

// Report sends events of epoch.
func (p *ProbeClient) Report(ctx context.Context, epoch int64, evs []Event) error {
	trace := ""
	if len(evs) > 0 {
		trace = evs[0].TraceID
	}
	return p.c.do(ctx, http.MethodPost, PathEvents, trace, Events{Host: p.Host, Epoch: epoch, Events: evs}, nil)
}

// AdminClient is an operator's client (admin certificate).
type AdminClient struct{ c *conn }

// NewAdminClient returns an operator's client of the replicas at endpoints.
func NewAdminClient(endpoints []string, tc *tls.Config) (*AdminClient, error) {
	c, err := newConn(endpoints, tc)
	if err != nil {
		return nil, err
	}
	return &AdminClient{c: c}, nil
}

// Do calls method path with body (nil for none) and decodes the reply into out.
func (a *AdminClient) Do(ctx context.Context, method, path string, body, out any) error {
	return a.c.do(ctx, method, path, NewTraceID(), body, out)
}
