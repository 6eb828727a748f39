package probe

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/testenv"
)

var binaries = sync.OnceValues(func() (map[string]string, error) {
	dir, err := os.MkdirTemp("", "allox-probe-test")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, pkg := range map[string]string{
		"gateway": "./cmd/gateway", "probe": "./cmd/probe", "daemon": "../../services/workspace-daemon",
	} {
		bin := filepath.Join(dir, name)
		if b, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		out[name] = bin
	}
	return out, nil
})

func TestMain(m *testing.M) {
	if s := os.Getenv("ALLOX_PROBE_SWARM"); s != "" {
		runSwarm(s)
		return
	}
	code := m.Run()
	for _, d := range builtDirs {
		os.RemoveAll(d)
	}
	if bins, err := binaries(); err == nil {
		os.RemoveAll(filepath.Dir(bins["gateway"]))
	}
	os.Exit(code)
}

func bins(t testing.TB) map[string]string {
	t.Helper()
	b, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proc is a real process of the test, its stderr in t.Logf and scanned for patterns.
type proc struct {
	cmd   *exec.Cmd
	wait  func() error
	mu    sync.Mutex
	lines []string
}

func start(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...)}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log(name + ": " + sc.Text())
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
	}()
	p.wait = sync.OnceValue(func() error { <-logged; return p.cmd.Wait() })
	t.Cleanup(func() { p.cmd.Process.Kill(); p.wait() })
	return p
}

// find waits up to 60s for a stderr line matching re and returns its first group.
func (p *proc) find(t testing.TB, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, l := range p.lines {
			if m := re.FindStringSubmatch(l); m != nil {
				p.mu.Unlock()
				return m[1]
			}
		}
		p.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no line matching %s in 60s", re)
	return ""
}

func (p *proc) kill() { p.cmd.Process.Signal(syscall.SIGKILL); p.wait() }

var (
	listeningRE = regexp.MustCompile(`msg=listening .*addr=(\S+)`)
	etcdRE      = regexp.MustCompile(`msg="embedded etcd" .*endpoint=(\S+)`)
)

// Lease timings of the tests: a Probe fences 1.5s after its last renewal, the Gateway
// reassigns after 3s.
var leaseFlags = []string{"--renew-every", "250ms", "--stop-after", "1500ms", "--lost-after", "3s"}

const (
	stopAfter = 1500 * time.Millisecond
	lostAfter = 3 * time.Second
)

// fleet is a PKI and the processes of one test.
type fleet struct {
	t   testing.TB
	pki string
	ca  *pki.CA
	// etcdData are the embedded etcd data directories of the replicas started with their own.
	etcdData []string
}

func newFleet(t *testing.T) *fleet { return newFleetTB(t) }

func newFleetTB(t testing.TB) *fleet {
	f := &fleet{t: t, pki: t.TempDir()}
	var err error
	if f.ca, err = pki.NewCA("test"); err != nil {
		t.Fatal(err)
	}
	if err := f.ca.Save(f.pki); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{{"server", "gateway"}, {"admin", wire.RoleAdmin}} {
		var hosts []string
		if c[1] == "gateway" {
			hosts = []string{"127.0.0.1"}
		}
		if err := f.ca.IssueFiles(f.pki, c[0], c[0], c[1], hosts...); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// gateway starts a replica: on its own embedded etcd, or on etcd (non-empty).
func (f *fleet) gateway(name, etcd string, lease ...string) (url, etcdEndpoint string, p *proc) {
	if lease == nil {
		lease = leaseFlags
	}
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--pki", f.pki, "--replica", name}, lease...)
	if etcd == "" {
		data := f.t.TempDir()
		f.etcdData = append(f.etcdData, data)
		args = append(args, "--data", data, "--etcd-listen", "127.0.0.1:0")
	} else {
		args = append(args, "--etcd", etcd)
	}
	p = start(f.t, "gateway-"+name, bins(f.t)["gateway"], args...)
	if etcd == "" {
		etcdEndpoint = p.find(f.t, etcdRE)
	}
	return "https://" + p.find(f.t, listeningRE), etcdEndpoint, p
}

// probeHost is a Probe process with the process runtime on a Btrfs store.
type probeHost struct {
	name, state string
	args        []string
	p           *proc
}

func (f *fleet) probe(host, gateways, store string, slots int, extra ...string) *probeHost {
	if err := f.ca.IssueFiles(f.pki, host, host, wire.RoleProbe); err != nil {
		f.t.Fatal(err)
	}
	tmp := f.t.TempDir()
	os.Chmod(filepath.Dir(tmp), 0o711) // runs reach their session sockets below the state directory
	os.Chmod(tmp, 0o711)
	h := &probeHost{name: host, state: filepath.Join(tmp, "state")}
	os.MkdirAll(filepath.Join(store, host), 0o755)
	h.args = []string{"serve", "--gateway", gateways, "--host", host, "--pki", f.pki, "--state", h.state, "--slots", fmt.Sprint(slots),
		"--workspace-daemon", bins(f.t)["daemon"], "--store", filepath.Join(store, host), "--cgroup-parent", cgroupParent(f.t, host),
		"--supervise-every", "100ms", "--sockets", shortDir(f.t)}
	h.args = append(h.args, extra...)
	h.p = start(f.t, host, bins(f.t)["probe"], h.args...)
	f.t.Cleanup(func() {
		if f.t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(h.state, "sandbox-*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				f.t.Logf("%s %s:\n%s", host, filepath.Base(l), b)
			}
		}
		killSandboxes(h.state)
	})
	return h
}

func (f *fleet) restart(h *probeHost) { h.p = start(f.t, h.name, bins(f.t)["probe"], h.args...) }

// sandbox reads the appliance endpoint and token of devbox from the Probe's state.
func (h *probeHost) sandbox(t testing.TB, devbox string) (endpoint, token string, pid int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.state, "sandbox-"+devbox+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Pid      int    `json:"pid"`
		Endpoint string `json:"endpoint"`
		Token    string `json:"token"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.Endpoint, st.Token, st.Pid
}

// shortDir is a directory with a short path (session sockets live below it), traversable by runs.
func shortDir(t testing.TB) string {
	d, err := os.MkdirTemp("/tmp", "ps")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o711)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// killSandboxes ends the daemons a Probe left (they outlive it by design).
func killSandboxes(state string) {
	files, _ := filepath.Glob(filepath.Join(state, "sandbox-*.json"))
	for _, f := range files {
		var st struct{ Pid int }
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &st) == nil && st.Pid > 0 {
			syscall.Kill(st.Pid, syscall.SIGKILL)
			for i := 0; i < 100 && syscall.Kill(st.Pid, 0) == nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

func (f *fleet) admin(urls ...string) *wire.AdminClient {
	tc, err := pki.ClientConfig(filepath.Join(f.pki, pki.CAFile), filepath.Join(f.pki, "admin.pem"), filepath.Join(f.pki, "admin-key.pem"))
	if err != nil {
		f.t.Fatal(err)
	}
	a, err := wire.NewAdminClient(urls, tc)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// cgroupParent is a cgroup prefix of the test's own, removed when it ends.
func cgroupParent(t testing.TB, host string) string {
	sum := sha256.Sum256([]byte(t.Name() + "/" + host))
	name := "allox-test-" + hex.EncodeToString(sum[:6])
	t.Cleanup(func() {
		for _, mount := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
			matches, _ := filepath.Glob(filepath.Join(mount, name+"*"))
			for _, m := range matches {
				var dirs []string
				filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
					if err == nil && d.IsDir() {
						dirs = append(dirs, p)
					}
					return nil
				})
				for i := len(dirs) - 1; i >= 0; i-- {
					os.Remove(dirs[i])
				}
			}
		}
	})
	return name
}

// proxy forwards TCP to target until partitioned: then it drops every connection and refuses
// new ones (a network partition between a Probe and its Gateway, of real processes).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newProxy(t testing.TB, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.partition(true) })
	go p.serve()
	return p
}

func (p *proxy) URL() string { return "https://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }()
		go func() { io.Copy(c, up); c.Close() }()
	}
}

func (p *proxy) partition(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// eventually polls cond for up to 60s: a state the system converges to, not a timing.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b, _ := json.Marshal(lastSeen)
			t.Fatalf("%s: not within 60s (last devbox status seen: %s)", what, b)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func getDevBox(t testing.TB, a *wire.AdminClient, name string) wire.DevBoxStatus {
	var st wire.DevBoxStatus
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Do(ctx, "GET", wire.PathDevBoxes+"/"+name, nil, &st); err != nil {
		var ref *wire.ErrRefused
		if errors.As(err, &ref) {
			t.Fatal(err)
		}
	}
	return st
}

// needBtrfs stops the test without the kernel pieces of a real store and sandboxed runs.
func needBtrfs(t testing.TB) {
	testenv.Root(t, "to loop-mount a Btrfs store and run workspace daemons", "./deploy/probe")
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap")
}

func runGatewayCLI(t testing.TB, f *fleet, url string, args ...string) string {
	t.Helper()
	out, err := execGateway(f, url, args...)
	if err != nil {
		t.Fatalf("gateway %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func execGateway(f *fleet, url string, args ...string) (string, error) {
	out, err := exec.Command(bins(f.t)["gateway"], append([]string{args[0], "--gateway", url, "--pki", f.pki}, args[1:]...)...).CombinedOutput()
	return string(out), err
}
