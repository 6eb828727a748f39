package gateway

import (
	"context"
	"crypto/tls"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// testConfig fences at 2s and reassigns after 3s (the etcd lease TTL: whole seconds).
var testConfig = Config{RenewEvery: 500 * time.Millisecond, StopAfter: 2 * time.Second, LostAfter: 3 * time.Second, ReconcileEvery: 100 * time.Millisecond}

// cluster is a real embedded etcd, its PKI and Gateway replicas serving mutual TLS.
type cluster struct {
	t    *testing.T
	cli  *clientv3.Client
	ca   *pki.CA
	dir  string
	urls []string
	gws  []*Gateway
}

func newCluster(t *testing.T, replicas int) *cluster {
	t.Helper()
	e, err := StartEmbedded(t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := Connect([]string{e.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c := &cluster{t: t, cli: cli, dir: t.TempDir()}
	if c.ca, err = pki.NewCA("test-ca"); err != nil {
		t.Fatal(err)
	}
	if err := c.ca.Save(c.dir); err != nil {
		t.Fatal(err)
	}
	if err := c.ca.IssueFiles(c.dir, "server", "gateway", "gateway", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	for i := range replicas {
		cfg := testConfig
		cfg.Replica = string(rune('a' + i))
		g, err := New(cli, cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(g.Handler())
		if srv.TLS, err = pki.ServerConfig(filepath.Join(c.dir, pki.CAFile), filepath.Join(c.dir, "server.pem"), filepath.Join(c.dir, "server-key.pem")); err != nil {
			t.Fatal(err)
		}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		c.urls = append(c.urls, srv.URL)
		c.gws = append(c.gws, g)
	}
	return c
}

// lead runs replica i's loops until the test ends and waits for it to lead.
func (c *cluster) lead(i int) context.CancelFunc {
	ctx, cancel := context.WithCancel(c.t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.gws[i].RunLoops(ctx) }()
	c.t.Cleanup(func() { cancel(); <-done })
	return cancel
}

func (c *cluster) waitLeader(i int) {
	c.t.Helper()
	c.eventually("replica leads", func() bool { return c.gws[i].IsLeader() })
}

func (c *cluster) tls(name, role string) *tls.Config {
	c.t.Helper()
	if err := c.ca.IssueFiles(c.dir, name, name, role); err != nil {
		c.t.Fatal(err)
	}
	tc, err := pki.ClientConfig(filepath.Join(c.dir, pki.CAFile), filepath.Join(c.dir, name+".pem"), filepath.Join(c.dir, name+"-key.pem"))
	if err != nil {
		c.t.Fatal(err)
	}
	return tc
}

func (c *cluster) probe(host string) *wire.ProbeClient {
	c.t.Helper()
	p, err := wire.NewProbeClient(host, c.urls, c.tls(host, wire.RoleProbe))
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *cluster) admin() *wire.AdminClient {
	c.t.Helper()
	a, err := wire.NewAdminClient(c.urls, c.tls("ops", wire.RoleAdmin))
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

// eventually polls cond for up to 20s (state the loops converge to, not a timing).
func (c *cluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
