package console

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFallbackThenReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console")
	var fb bytes.Buffer
	c := Open(path, &fb)
	c.Line("before")
	c.Flush(time.Minute)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Reopen()
	c.Line("after")
	c.Flush(time.Minute)
	got, _ := os.ReadFile(path)
	if fb.String() != "before\n" || string(got) != "after\n" {
		t.Errorf("fallback %q, console %q; want before / after", fb.String(), got)
	}
}

// gate is a console that blocks until opened.
type gate struct {
	open chan struct{}
	mu   sync.Mutex
	b    bytes.Buffer
}

func (g *gate) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.b.Write(p)
}

func TestStuckConsoleDropsServiceOutputOnly(t *testing.T) {
	g := &gate{open: make(chan struct{})}
	c := Open(filepath.Join(t.TempDir(), "absent"), g)
	c.Line("MARKER-1")
	start := time.Now()
	for i := range 3 * queueLen {
		fmt.Fprintf(c.Lossy(), "[svc] line %d\n", i)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("service output blocked for %v on a stuck console", took)
	}
	if c.Flush(50 * time.Millisecond) {
		t.Fatal("Flush succeeded on a stuck console")
	}
	close(g.open)
	c.Line("MARKER-2")
	if !c.Flush(10 * time.Second) {
		t.Fatal("Flush timed out after the console recovered")
	}
	out := g.b.String()
	first := strings.Index(out, "MARKER-1\n")
	if first < 0 || strings.Index(out, "[svc]") < first || !strings.HasSuffix(out, "MARKER-2\n") {
		t.Errorf("markers lost or out of order:\n%.200s ... %s", out, out[max(0, len(out)-200):])
	}
	if !strings.Contains(out, "lines of service output dropped") {
		t.Error("no notice of the dropped lines")
	}
}
