package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/manifest"
)

// runMainEnv makes the test binary run init's main instead of the tests, so the tests drive
// the real program without a separate build.
const runMainEnv = "ALLOX_INIT_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// initProc is one run of init with its console (stderr) streamed line by line.
type initProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	more  chan struct{}
	eof   chan struct{}
}

func startInit(t *testing.T, cmd *exec.Cmd, console io.Reader) *initProc {
	t.Helper()
	p := &initProc{cmd: cmd, more: make(chan struct{}, 1), eof: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(console)
		for sc.Scan() {
			t.Logf("console: %s", sc.Text())
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return p
}

// dryInit runs init against root as a dry test run.
func dryInit(t *testing.T, root string) *initProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{runMainEnv + "=1", testRootEnv + "=" + root, "PATH=/usr/bin:/bin"}
	r, w := io.Pipe()
	cmd.Stderr = w
	p := startInit(t, cmd, r)
	go func() { cmd.Wait(); w.Close() }()
	return p
}

// await waits for a console line that starts with prefix.
func (p *initProc) await(t *testing.T, prefix string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if p.index(prefix) >= 0 {
			return
		}
		select {
		case <-p.more:
		case <-p.eof:
			if p.index(prefix) < 0 {
				t.Fatalf("init ended without printing %q", prefix)
			}
		case <-deadline:
			t.Fatalf("no %q on the console in 30s", prefix)
		}
	}
}

func (p *initProc) index(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	return -1
}

// markers are the console lines that start with ALLOX-, in order.
func (p *initProc) markers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if strings.HasPrefix(l, "ALLOX-") {
			out = append(out, l)
		}
	}
	return out
}

func writeManifest(t *testing.T, root string, m *manifest.Manifest) {
	t.Helper()
	p := filepath.Join(root, manifest.Path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func testManifest(services ...manifest.Service) *manifest.Manifest {
	return &manifest.Manifest{
		Version:  manifest.Version,
		Hostname: "allox-test",
		Store:    manifest.Store{Serial: "allox-test-absent", Mountpoint: "/run/ws", Label: "ws", FallbackSizeMiB: 256},
		Services: services,
	}
}

func TestRefusesOutsidePID1(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{runMainEnv + "=1"}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want status 2", err)
	}
	if !strings.Contains(string(out), "refusing to run") || strings.Contains(string(out), "ALLOX-") {
		t.Errorf("output %q: want the refusal and nothing else", out)
	}
}
