package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// TestSessionNetworkInARealRun checks, on a real store with real bubblewrap, real namespaces and
// the real broker, the session-network plugin end to end: a proxy session's run has only lo, the
// proxy env, reaches a test server through 127.0.0.1:3128 and through allox network connect, and
// not directly; a listener left by one run is reachable from the session's next run and not from
// another session's; a disabled session's run is as without the plugin; session.get reports the
// mode; a bad mode is refused naming params.network. The daemon is built as mkimage builds it
// for plugins = ["session-network"].
func TestSessionNetworkInARealRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello through the broker") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	policy := filepath.Join(t.TempDir(), "policy")
	must(t, os.WriteFile(policy, []byte("allow cidr 127.0.0.1/32\n"), 0o600))
	root := btrfsRoot(t)
	bin, err := builtSessionNetwork()
	must(t, err)
	loop := daemonOn(t, bin, root, "--session-network", "proxy", "--session-network-policy", policy)
	mustPost(t, loop, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"px"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"other","network":"isolated"}}`)
	mustPost(t, loop, `{"action":"session.create","params":{"agent_id":"a","session_id":"off","network":"disabled"}}`)
	if _, rerr := call(t, loop, "", "session.create", `{"agent_id":"a","session_id":"bad","network":"open"}`); rerr == nil || rerr.Field != "params.network" {
		t.Errorf("a bad mode: %+v, want refused naming params.network", rerr)
	}
	if _, rerr := call(t, loop, "", "session.get", `{"agent_id":"a","session_id":"bad"}`); rerr == nil || rerr.Code != rpc.CodeNotFound {
		t.Errorf("the refused session exists: %+v", rerr)
	}
	var s struct {
		Plugins map[string]json.RawMessage `json:"plugins"`
	}
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"session.get","params":{"agent_id":"a","session_id":"other"}}`), &s))
	if got := string(s.Plugins["session-network"]); got != `{"mode":"isolated"}` {
		t.Errorf("session.get plugins.session-network = %s", got)
	}
	runOut := func(session, script string) (rpc.Run, string) {
		var r rpc.Run
		must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.start","params":{"agent_id":"a","session_id":"`+session+`","argv":["/bin/sh","-c",`+quote(script)+`]}}`), &r))
		must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
		var out rpc.Output
		must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.output","params":{"run_id":"`+r.RunID+`"}}`), &out))
		return r, out.Data
	}
	py := fmt.Sprintf(`import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://127.0.0.1:%[1]d/ HTTP/1.1\r\nHost: 127.0.0.1:%[1]d\r\nConnection: close\r\n\r\n")
data = b""
while True:
    b = s.recv(4096)
    if not b: break
    data += b
print("proxy:", data.decode().split("\r\n\r\n", 1)[1])
try:
    socket.create_connection(("127.0.0.1", %[1]d), timeout=2); print("direct: connected")
except OSError: print("direct: refused")
print("ifaces:", ",".join(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]))
`, port)
	r, out := runOut("px", "echo \"env: $HTTPS_PROXY $NO_PROXY\"; /usr/bin/python3 -c '"+py+"'"+
		"; printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /run/allox/bin/allox network connect 127.0.0.1 "+fmt.Sprint(port)+" | tail -n 1; echo")
	want := "env: http://127.0.0.1:3128 localhost,127.0.0.1,::1\nproxy: hello through the broker\ndirect: refused\nifaces: lo\nhello through the broker\n"
	if !exited0(r) || out != want {
		t.Errorf("proxy session's run: %+v\nstdout %q\nwant   %q", r, out, want)
	}
	if got := string(r.Plugins["session-network"]); got != `{"mode":"proxy"}` {
		t.Errorf("run metadata = %s", got)
	}
	connectRun := r.RunID
	// A destination the policy denies: refused before the stream is switched, so the client says
	// so and fails (the policy allows only 127.0.0.1; 10.0.0.1 is a private address).
	if _, out := runOut("px", "/run/allox/bin/allox network connect 10.0.0.1 22 </dev/null 2>&1; echo exit=$?"); !strings.Contains(out, "denied by the network policy") || !strings.HasSuffix(out, "exit=1\n") {
		t.Errorf("connect to a denied destination printed %q, want the policy's refusal and exit 1", out)
	}
	// A listener left by one run is reachable from the session's next run only.
	var first rpc.Run
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"process.start","params":{"agent_id":"a","session_id":"other","argv":["/usr/bin/python3","-c",`+
		quote(`import socket
s = socket.socket(); s.bind(("127.0.0.1", 9000)); s.listen()
c, _ = s.accept(); c.sendall(b"same session"); c.close()`)+`]}}`), &first))
	probe := `/usr/bin/python3 -c 'import socket,time
for i in range(50):
    try:
        print(socket.create_connection(("127.0.0.1", 9000), timeout=2).recv(100).decode()); break
    except OSError as e:
        err = e; time.sleep(0.1)
else: print("refused")'`
	if _, out := runOut("px", probe); strings.TrimSpace(out) != "refused" {
		t.Errorf("another session reached the listener: %q", out)
	}
	if _, out := runOut("other", probe); strings.TrimSpace(out) != "same session" {
		t.Errorf("the session's next run: %q, want the listener its first run left", out)
	}
	mustPost(t, loop, `{"action":"process.wait","params":{"run_id":"`+first.RunID+`"}}`)
	// disabled: the run's network is what it is without the plugin (here the test machine's:
	// the daemon runs without --unshare-net), no proxy env, no metadata.
	dev, err := os.ReadFile("/proc/net/dev")
	must(t, err)
	var host []string
	for _, l := range strings.Split(strings.TrimSpace(string(dev)), "\n")[2:] {
		host = append(host, strings.TrimSpace(strings.SplitN(l, ":", 2)[0]))
	}
	if r, out := runOut("off", `echo "env:$HTTP_PROXY."; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '`); !exited0(r) || out != "env:.\n"+strings.Join(host, "\n")+"\n" {
		t.Errorf("disabled session's run: %+v %q, want no proxy env and the interfaces %q", r, out, host)
	} else if _, ok := r.Plugins["session-network"]; ok {
		t.Errorf("a disabled session's run has session-network metadata: %s", r.Plugins)
	}
	mustPost(t, loop, `{"action":"session.delete","params":{"agent_id":"a","session_id":"px"}}`)
	entries, _ := os.ReadDir(filepath.Join(root, ".allox-state", "plugins", "session-network", "netns"))
	if len(entries) != 1 {
		t.Errorf("namespaces after deleting px: %d, want other's only", len(entries))
	}
	var page struct {
		Records []struct {
			Kind, Decision string
			Port           int
			RunID          string `json:"run_id"`
		}
	}
	must(t, json.Unmarshal(mustPost(t, loop, `{"action":"network.audit","params":{"agent_id":"a","session_id":"px"}}`), &page))
	if len(page.Records) != 3 {
		t.Errorf("audit of px: %+v, want the proxied GET, the connect and the denied connect", page.Records)
	}
	for _, rec := range page.Records {
		if rec.Kind == "connect" && rec.Decision == "allow" && rec.RunID != connectRun {
			t.Errorf("the connect's audit names run %q, want %s, the run that made it (from the socket's peer)", rec.RunID, connectRun)
		}
	}
}

// builtSessionNetwork is the daemon built with the session-network plugin linked in.
var builtSessionNetwork = sync.OnceValues(func() (string, error) { return goBuild("allox_session_network") })
