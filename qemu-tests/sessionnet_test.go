package qemutests

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// sessionNetworkOut is the subdirectory of outDir() that `make image` builds from
// testdata/session-network.hcl: the appliance with the session-network plugin in proxy mode.
const sessionNetworkOut = "session-network"

// The guest ports the test forwards from vm.GuestFwdAddr to its servers on this machine. The
// image's policy allows the first three; 8081 stays denied by the built-in private-range rule.
const (
	guestHTTP   = 8080
	guestDenied = 8081
	guestTLS    = 8443
	guestSSH    = 2222
)

// TestSessionNetworkInGuest boots the appliance with the session-network plugin and drives its
// three modes from inside sandboxed runs, with the test's servers on this machine's loopback
// reached only through QEMU's forwards (the guest's user network is otherwise restricted):
// plain HTTP through the broker's proxy, TLS through CONNECT, ssh with allox network connect as
// its ProxyCommand (and the python shim), each allowed and denied by the policy and audited; a
// direct connection from the sandbox fails; an isolated session has only its loopback; a
// disabled session is in the guest's network as without the plugin.
func TestSessionNetworkInGuest(t *testing.T) {
	a := needApplianceIn(t, imageMode, filepath.Join(outDir(), sessionNetworkOut))
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello from the test machine\n")
	}))
	defer web.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "the policy should have kept you out\n")
	}))
	defer denied.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello over TLS\n")
	}))
	defer tlsSrv.Close()
	sshAddr := startSSHServer(t)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})

	ctx := testContext(t, 2*bootBudget)
	b := a.bootWith(ctx, t, imageMode, blankDisk(t), func(o *vm.Options) {
		o.GuestFwd = map[int]int{guestHTTP: port(t, web.Listener.Addr()), guestDenied: port(t, denied.Listener.Addr()),
			guestTLS: port(t, tlsSrv.Listener.Addr()), guestSSH: port(t, sshAddr)}
	})
	b.waitReady(ctx, t)
	g := &attacker{t: t, ctx: ctx, b: b, agent: "agent-a", session: "px"}
	g.must(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "px"}, nil)
	g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "iso", "network": "isolated"}, nil)
	g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "off", "network": "disabled"}, nil)
	in := func(session string) *attacker { c := *g; c.session = session; return &c }
	run := func(t *testing.T, g *attacker, script string, extra map[string]any) (stdout, stderr string, exit int) {
		t.Helper()
		out, r := g.sh(t, script, extra)
		stdout, stderr, _ = strings.Cut(out, "--stderr--\n")
		exit = -1
		if r.ExitCode != nil {
			exit = *r.ExitCode
		}
		t.Logf("%s: exit %d\n%s--stderr--\n%s", script, exit, stdout, stderr)
		return stdout, stderr, exit
	}
	dest := func(p int) string { return fmt.Sprintf("%s:%d", vm.GuestFwdAddr, p) }

	t.Run("proxy session: only loopback, the proxy's environment, a named user", func(t *testing.T) {
		stdout, _, exit := run(t, g, `id -un; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; tail -n +2 /proc/net/route | wc -l; echo "$https_proxy $NO_PROXY"`, nil)
		if want := "allox-run\nlo\n0\nhttp://127.0.0.1:3128 localhost,127.0.0.1,::1\n"; exit != 0 || stdout != want {
			t.Errorf("stdout %q (exit %d), want %q", stdout, exit, want)
		}
	})
	t.Run("plain HTTP through the proxy", func(t *testing.T) {
		if stdout, _, exit := run(t, g, "wget -q -O - http://"+dest(guestHTTP)+"/", nil); exit != 0 || stdout != "hello from the test machine\n" {
			t.Errorf("allowed GET: exit %d, stdout %q", exit, stdout)
		}
		if stdout, stderr, exit := run(t, g, "wget -q -O - http://"+dest(guestDenied)+"/", nil); exit == 0 || strings.Contains(stdout, "kept you out") || !strings.Contains(stderr, "403") {
			t.Errorf("denied GET: exit %d, stdout %q, stderr %q: want a 403 from the broker", exit, stdout, stderr)
		}
	})
	direct := fmt.Sprintf(`python3 -c 'import socket
try: socket.create_connection(("%s", %d), timeout=5); print("connected")
except OSError as e: print(e.strerror)'`, vm.GuestFwdAddr, guestHTTP)
	t.Run("a direct connection from the sandbox fails", func(t *testing.T) {
		if stdout, _, exit := run(t, g, direct, nil); exit != 0 || stdout != "Network is unreachable\n" {
			t.Errorf("a direct connect() to the test server: exit %d, stdout %q, want ENETUNREACH (no route)", exit, stdout)
		}
	})
	t.Run("TLS through CONNECT", func(t *testing.T) {
		script := `cat > ca.pem && printf 'GET / HTTP/1.0\r\n\r\n' | openssl s_client -quiet -verify_return_error -CAfile ca.pem -proxy 127.0.0.1:3128 -connect ` + dest(guestTLS)
		if stdout, _, exit := run(t, g, script, map[string]any{"stdin": string(ca)}); exit != 0 || !strings.Contains(stdout, "hello over TLS") {
			t.Errorf("CONNECT to the allowed TLS port: exit %d, stdout %q", exit, stdout)
		}
		script = `printf 'GET / HTTP/1.0\r\n\r\n' | openssl s_client -quiet -proxy 127.0.0.1:3128 -connect ` + dest(guestDenied)
		if stdout, _, exit := run(t, g, script, nil); exit == 0 || strings.Contains(stdout, "kept you out") {
			t.Errorf("CONNECT to a port the policy does not allow: exit %d, stdout %q", exit, stdout)
		}
	})
	t.Run("ssh with allox network connect as its ProxyCommand", func(t *testing.T) {
		for _, proxy := range []string{"/run/allox/bin/allox network connect %h %p", "python3 /run/allox/network.py connect %h %p"} {
			script := fmt.Sprintf(`ssh -o ProxyCommand=%q -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -p %d probe@%s hello`,
				proxy, guestSSH, vm.GuestFwdAddr)
			if stdout, _, exit := run(t, g, script, nil); exit != 0 || stdout != "ssh: hello, through the broker\n" {
				t.Errorf("%s: exit %d, stdout %q", proxy, exit, stdout)
			}
		}
		if _, stderr, exit := run(t, g, "/run/allox/bin/allox network connect "+vm.GuestFwdAddr+fmt.Sprint(" ", guestDenied)+" </dev/null", nil); exit == 0 || !strings.Contains(stderr, "denied") {
			t.Errorf("connect to a denied port: exit %d, stderr %q", exit, stderr)
		}
	})
	t.Run("isolated session: loopback only, no proxy", func(t *testing.T) {
		stdout, _, exit := run(t, in("iso"), `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo "proxy=$http_proxy"; `+direct, nil)
		if exit != 0 || stdout != "lo\nproxy=\nNetwork is unreachable\n" {
			t.Errorf("stdout %q (exit %d), want lo only, no proxy, nothing reached", stdout, exit)
		}
	})
	t.Run("disabled session: the guest's network, as without the plugin", func(t *testing.T) {
		stdout, _, exit := run(t, in("off"), `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' '; echo "proxy=$http_proxy"`, nil)
		if exit != 0 || !strings.Contains(stdout, "eth0") || !strings.HasSuffix(stdout, "proxy=\n") {
			t.Errorf("stdout %q (exit %d), want the guest's interfaces and no proxy", stdout, exit)
		}
	})
	t.Run("every request audited, with its decision and rule", func(t *testing.T) {
		var page struct {
			Records []struct {
				SessionID string `json:"session_id"`
				Method    string `json:"method"`
				Port      int    `json:"port"`
				Decision  string `json:"decision"`
				Rule      string `json:"rule"`
				BytesDown int64  `json:"bytes_down"`
			} `json:"records"`
		}
		g.must(t, "network.audit", map[string]any{"agent_id": "agent-a", "session_id": "px", "limit": 100}, &page)
		seen := map[string]string{}
		for _, r := range page.Records {
			key := fmt.Sprintf("%s %d %s", r.Method, r.Port, r.Decision)
			seen[key] = r.Rule
			if r.Decision == "allow" && r.BytesDown == 0 {
				t.Errorf("allowed %s to port %d relayed nothing back: %+v", r.Method, r.Port, r)
			}
		}
		for _, want := range []string{"GET 8080 allow", "GET 8081 deny", "CONNECT 8443 allow", "CONNECT 8081 deny", "connect 2222 allow", "connect 8081 deny"} {
			if _, ok := seen[want]; !ok {
				t.Errorf("no audit record %q; have %v", want, seen)
			}
		}
		if rule := seen["GET 8081 deny"]; !strings.Contains(rule, "private") {
			t.Errorf("the denied GET's rule = %q, want the built-in private-range rule", rule)
		}
	})
	b.powerOff(ctx, t)
}

func port(t *testing.T, a net.Addr) int {
	t.Helper()
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		t.Fatalf("%v is not a TCP address", a)
	}
	return tcp.Port
}

// startSSHServer serves SSH on this machine's loopback for the test's life: no authentication,
// and every exec request answered with "ssh: <command>, through the broker" and exit status 0.
func startSSHServer(t *testing.T) net.Addr {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSSH(c, cfg)
		}
	}()
	return ln.Addr()
}

func serveSSH(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "session channels only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			defer ch.Close()
			for req := range creqs {
				if req.Type != "exec" {
					req.Reply(false, nil)
					continue
				}
				var p struct{ Command string }
				ssh.Unmarshal(req.Payload, &p)
				req.Reply(true, nil)
				fmt.Fprintf(ch, "ssh: %s, through the broker\n", p.Command)
				ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
				return
			}
		}()
	}
}
