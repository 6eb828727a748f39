package sessionnet

// TestRealNamespacesAndBroker drives the plugin with the real network namespaces
// (services/internal/netns) and the real broker (services/internal/netbroker): it needs root.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/allox-os/allox/services/internal/netbroker"
	"github.com/allox-os/allox/services/internal/netns"
	"github.com/allox-os/allox/services/internal/plugin"
)

type realNS struct{}

func (realNS) Create(p string) error                                { return netns.Create(p) }
func (realNS) Open(p string) (*os.File, error)                      { return netns.Open(p) }
func (realNS) Remove(p string) error                                { return netns.Remove(p) }
func (realNS) RemoveAll(d string) error                             { return netns.RemoveAll(d) }
func (realNS) Listen(f *os.File, n, a string) (net.Listener, error) { return netns.Listen(f, n, a) }

type realBroker struct {
	*netbroker.Broker
	dir string
}

func (b realBroker) Audit(q AuditQuery) (any, error) {
	return netbroker.ReadAudit(b.dir, netbroker.Query(q))
}

func (b realBroker) Dial(ctx context.Context, agent, session, run, host string, port uint16) (Tunnel, error) {
	t, err := b.Broker.Dial(ctx, agent, session, run, host, port)
	if errors.Is(err, netbroker.ErrDenied) {
		return nil, fmt.Errorf("%w: %w", ErrDenied, err)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

func inode(t *testing.T, f *os.File) uint64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestRealNamespacesAndBroker(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the test server") }))
	defer srv.Close()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	state := t.TempDir()
	policy := filepath.Join(state, "policy")
	if err := os.WriteFile(policy, []byte("allow cidr 127.0.0.1/32\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(state, "audit")
	os.MkdirAll(audit, 0o700)
	b, err := netbroker.New(netbroker.Config{PolicyPath: policy, AuditDir: audit})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	open, err := New(Config{Default: Proxy}, realNS{}, realBroker{b, audit})
	if err != nil {
		t.Fatal(err)
	}
	var c *plugin.Contribution
	l, err := plugin.Open(context.Background(), plugin.Deps{State: state}, []plugin.Plugin{{
		Manifest: plugin.Manifest{Name: Name, API: plugin.APIVersion}, Flag: "--session-network proxy", Enabled: true, SessionParams: SessionParams,
		Open: func(ctx context.Context, core plugin.Core) (*plugin.Contribution, error) {
			c, err = open(ctx, core)
			return c, err
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := func(s string) *os.File {
		run, err := l.StartRun(context.Background(), plugin.RunStart{AgentID: "a", SessionID: s}, nil)
		if err != nil || run.NetNS == nil {
			t.Fatalf("start %s: %v %+v", s, err, run)
		}
		return run.NetNS
	}
	ns1 := start("s1")
	ns1b := start("s1")
	ns2 := start("s2")
	if inode(t, ns1) != inode(t, ns1b) || inode(t, ns1) == inode(t, ns2) {
		t.Errorf("namespaces: s1 %d, s1 again %d, s2 %d: want one per session, reused", inode(t, ns1), inode(t, ns1b), inode(t, ns2))
	}
	var ifaces []string
	var direct error
	var proxy net.Conn
	if err := netns.Do(ns1, func() error {
		is, err := net.Interfaces()
		for _, i := range is {
			ifaces = append(ifaces, i.Name)
		}
		if c, err := net.Dial("tcp", srv.Listener.Addr().String()); err == nil {
			c.Close()
		} else {
			direct = err
		}
		proxy, err = net.Dial("tcp", ProxyAddr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ifaces, ",") != "lo" {
		t.Errorf("interfaces in the session's namespace: %q, want only lo", ifaces)
	}
	if direct == nil {
		t.Error("a direct connect to the test server from the session's namespace succeeded")
	}
	fmt.Fprintf(proxy, "GET %s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", srv.URL, srv.Listener.Addr())
	resp, err := http.ReadResponse(bufio.NewReader(proxy), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	proxy.Close()
	if resp.StatusCode != 200 || string(body) != "hello from the test server" {
		t.Errorf("through the proxy: %d %q", resp.StatusCode, body)
	}
	res, err := c.Actions[ActionConnect].Handler(context.Background(), &plugin.Call{Params: json.RawMessage(
		fmt.Sprintf(`{"agent_id":"a","session_id":"s1","host":"127.0.0.1","port":%d}`, echo.Addr().(*net.TCPAddr).Port)), Upgrade: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, srvSide := net.Pipe()
	go res.(plugin.Relay)(srvSide)
	cli.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(cli, buf); err != nil || string(buf) != "ping" {
		t.Errorf("connect relayed %q, %v", buf, err)
	}
	cli.Close()
	for _, f := range []*os.File{ns1, ns1b, ns2} {
		f.Close()
	}
	if err := l.SessionDeleted("a", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "plugins", Name, "netns", key{"a", "s1"}.hash())); !os.IsNotExist(err) {
		t.Errorf("the deleted session's namespace is kept: %v", err)
	}
	page, err := c.Actions[ActionAudit].Handler(context.Background(), &plugin.Call{Params: json.RawMessage(`{"agent_id":"a"}`)})
	out, _ := json.Marshal(page)
	if err != nil || !strings.Contains(string(out), srv.Listener.Addr().(*net.TCPAddr).IP.String()) {
		t.Errorf("audit: %s %v", out, err)
	}
	t.Logf("audit: %s", out)
}
