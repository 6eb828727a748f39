package supervise

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/manifest"
	"golang.org/x/sys/unix"
)

// reaper is the one reaper of the test process, which is a child subreaper like PID 1.
var reaper *Reaper

func TestMain(m *testing.M) {
	if _, err := Trampoline(os.Args); err != nil { // this binary is the tests' trampoline, as init is
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	if addr := os.Getenv("SUPERVISE_TEST_LISTEN"); addr != "" {
		listenHelper(addr)
		return
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
		os.Exit(1)
	}
	reaper = NewReaper()
	ctx, cancel := context.WithCancel(context.Background())
	go reaper.Run(ctx)
	code := m.Run()
	cancel()
	os.Exit(code)
}

// listenHelper is a service that becomes ready late: it listens after 300 ms, then waits.
func listenHelper(addr string) {
	time.Sleep(300 * time.Millisecond)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("listening")
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Close()
	}
}

// recorder collects events and lets a test wait for one.
type recorder struct {
	mu     sync.Mutex
	events []Event
	start  time.Time
	wake   chan struct{}
}

func newRecorder() *recorder { return &recorder{start: time.Now(), wake: make(chan struct{}, 1)} }

func (r *recorder) notify(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// lines renders events as "name kind[ status]" for comparison.
func (r *recorder) lines(kinds ...Kind) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if len(kinds) > 0 && !contains(kinds, e.Kind) {
			continue
		}
		s := e.Service + " " + string(e.Kind)
		if e.Kind == Exited || e.Kind == Done {
			s += fmt.Sprintf(" %d", e.Status)
		}
		out = append(out, s)
	}
	return out
}

func contains(kinds []Kind, k Kind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// await waits until a line equal to want has been seen count times.
func (r *recorder) await(t *testing.T, want string, count int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		n := 0
		for _, l := range r.lines() {
			if l == want {
				n++
			}
		}
		if n >= count {
			return
		}
		select {
		case <-r.wake:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no %d× %q in 10s; events:\n%s", count, want, strings.Join(r.lines(), "\n"))
		}
	}
}

// start builds and starts a supervisor whose services are shell one-liners by default.
func start(t *testing.T, cfg Config, services ...manifest.Service) (*Supervisor, *recorder) {
	t.Helper()
	rec := newRecorder()
	cfg.Notify = rec.notify
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = Backoff{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond, Reset: time.Hour}
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 2 * time.Second
	}
	s, err := New(cfg, reaper, services)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s, rec
}

func sh(name, restart, script string) manifest.Service {
	return manifest.Service{Name: name, Restart: restart, Command: []string{"/bin/sh", "-c", script}}
}

// syncBuffer is a console for tests.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
