package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The longest --session-sockets directory the flags accept can still bind a session's socket and
// an agent socket, through the staging directory; one byte more is refused.
func TestSocketPathLimit(t *testing.T) {
	base := t.TempDir()
	d := base + "/" + strings.Repeat("d", maxSocketPath-boundPathLen-len(base)-1)
	if err := os.MkdirAll(d, 0o711); err != nil {
		t.Fatal(err)
	}
	s := &SessionSockets{dir: d, uid: os.Getuid(), gid: os.Getgid()}
	for _, name := range []string{socketName(SessionRef{AgentID: "a", SessionID: "s"}), agentSocketName(randomID())} {
		if len(name) > socketNameLen {
			t.Errorf("socket name %q is longer than %d", name, socketNameLen)
		}
		ln, path, err := s.listen(name)
		if err != nil {
			t.Fatalf("listen %s in a %d-byte directory: %v", name, len(d), err)
		}
		ln.Close()
		os.Remove(path)
		if filepath.Dir(path) != d {
			t.Errorf("socket at %s, want it in %s", path, d)
		}
	}
	cfg := Config{SessionSockets: d}
	if err := errors.Join(cfg.validateSessionSockets()...); err != nil && strings.Contains(err.Error(), "bytes long") {
		t.Errorf("a %d-byte directory refused: %v", len(d), err)
	}
	cfg.SessionSockets = d + "x"
	if err := errors.Join(cfg.validateSessionSockets()...); err == nil || !strings.Contains(err.Error(), "bytes long") {
		t.Errorf("a %d-byte directory accepted: %v", len(d)+1, err)
	}
}
