package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/services/internal/tracked"
)

// runIn runs sh -c script in agent/session and returns its exit code and stderr.
func runIn(t *testing.T, s *Service, agent, session, script string) (int, string) {
	t.Helper()
	st, err := s.StartProcess(context.Background(), tracked.StartRequest{AgentID: agent, SessionID: session, Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatalf("start in %s/%s: %v", agent, session, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if st, err = s.WaitRun(ctx, st.RunID); err != nil {
		t.Fatalf("wait: %v", err)
	}
	var stderr []byte
	for off := int64(0); ; {
		data, next, eof, err := s.RunOutput(st.RunID, "stderr", off, 0)
		if err != nil {
			t.Fatal(err)
		}
		stderr, off = append(stderr, data...), next
		if eof || len(data) == 0 {
			break
		}
	}
	return st.ExitCode, string(stderr)
}

// An agent created with shared "rw" has runs that write its shared/, and what one session's run
// wrote there another session's run reads; an agent with the default ("ro") has runs that cannot
// (EROFS), on real Btrfs and bubblewrap.
func TestAgentSharedMode(t *testing.T) {
	s := newService(t)
	if _, err := s.CreateAgentWith("w", AgentOptions{SharedWritable: true}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2"} {
		if _, err := s.CreateSession("w", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !s.SharedWritable("w") || s.SharedWritable("a") {
		t.Fatalf("SharedWritable: w %v, a %v; want true, false", s.SharedWritable("w"), s.SharedWritable("a"))
	}

	if code, stderr := runIn(t, s, "w", "w1", `echo from-w1 > "$ALLOX_AGENT_SHARED/note" && mkdir "$ALLOX_AGENT_SHARED/dir"`); code != 0 {
		t.Fatalf("rw agent: write to shared/ failed (exit %d): %s", code, stderr)
	}
	if code, stderr := runIn(t, s, "w", "w2", `test "$(cat "$ALLOX_AGENT_SHARED/note")" = from-w1 && echo from-w2 >> "$ALLOX_AGENT_SHARED/note"`); code != 0 {
		t.Fatalf("rw agent: the other session did not read and append the note (exit %d): %s", code, stderr)
	}
	a, err := s.GetAgent("w")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(a.Shared, "note")); err != nil || string(b) != "from-w1\nfrom-w2\n" {
		t.Errorf("shared/note = %q, %v; want both sessions' lines", b, err)
	}

	code, stderr := runIn(t, s, "a", "s1", `echo x > "$ALLOX_AGENT_SHARED/note"`)
	if code == 0 || !strings.Contains(stderr, "Read-only file system") {
		t.Errorf("ro agent: write to shared/ = exit %d, stderr %q; want it refused with EROFS", code, stderr)
	}
	if a, err := s.GetAgent("a"); err != nil {
		t.Fatal(err)
	} else if _, err := os.Stat(filepath.Join(a.Shared, "note")); !os.IsNotExist(err) {
		t.Errorf("ro agent: the refused write landed: %v", err)
	}
}
