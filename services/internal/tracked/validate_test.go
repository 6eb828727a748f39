package tracked

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	base := t.TempDir()
	// validate refuses workspaces under /tmp; resolveCwd is checked below.
	ws := Workspace{Current: "/var/lib/none/current", Shared: "/var/lib/none/shared", AgentDir: "/var/lib/none"}
	ok := StartRequest{AgentID: "a", SessionID: "s", Workspace: ws, Argv: []string{"true"}}
	tests := []struct {
		name  string
		mod   func(*StartRequest)
		field string
	}{
		{"empty argv", func(r *StartRequest) { r.Argv = nil }, "argv"},
		{"nul in argv", func(r *StartRequest) { r.Argv = []string{"a\x00b"} }, "argv"},
		{"bad agent", func(r *StartRequest) { r.AgentID = "../x" }, "agent_id"},
		{"dot session", func(r *StartRequest) { r.SessionID = ".hidden" }, "session_id"},
		{"env with =", func(r *StartRequest) { r.Env = map[string]string{"A=B": "c"} }, "env"},
		{"env HOME", func(r *StartRequest) { r.Env = map[string]string{"HOME": "/"} }, "env"},
		{"negative timeout", func(r *StartRequest) { r.Timeout = -time.Second }, "timeout"},
		{"relative workspace", func(r *StartRequest) { r.Workspace.Current = "current" }, "workspace"},
		{"workspace in /tmp", func(r *StartRequest) { r.Workspace.Current = base }, "workspace"},
		{"missing workspace", func(r *StartRequest) {}, "workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.mod(&r)
			_, err := validate(&r, false)
			var ie *InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) || ie.Field != tt.field {
				t.Errorf("validate = %v, want InvalidError on field %q", err, tt.field)
			}
		})
	}
}

func TestResolveCwd(t *testing.T) {
	cur := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cur, "src", "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(cur, "esc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src", filepath.Join(cur, "in")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cwd, want string
	}{
		{"", cur},
		{".", cur},
		{"src/pkg", filepath.Join(cur, "src", "pkg")},
		{"in", filepath.Join(cur, "src")},
		{"src/../src", filepath.Join(cur, "src")},
		{"..", ""},
		{"../x", ""},
		{"/etc", ""},
		{"esc", ""},
		{"missing", ""},
	}
	for _, tt := range tests {
		got, err := resolveCwd(cur, tt.cwd)
		if tt.want == "" {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("resolveCwd(%q) = %q, %v; want ErrInvalid", tt.cwd, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resolveCwd(%q) = %q, %v; want %q", tt.cwd, got, err, tt.want)
		}
	}
}

func TestRunIDsSortAndAreSafe(t *testing.T) {
	var g idGen
	prev := ""
	for range 1000 {
		id := g.next()
		if !validID(id) || id <= prev {
			t.Fatalf("id %q after %q: want safe and increasing", id, prev)
		}
		prev = id
	}
}

func TestBoundedWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &boundedWriter{f: f, max: 5}
	for _, s := range []string{"abc", "defg", "h"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	b, _ := os.ReadFile(f.Name())
	if string(b) != "abcde" || w.dropped != 3 {
		t.Errorf("kept %q dropped %d, want \"abcde\" and 3", b, w.dropped)
	}
}

func TestValidParent(t *testing.T) {
	for p, want := range map[string]bool{"allox": true, "allox/daemon": true, "": false, "/allox": false, "a/../b": false, "a//b": false, ".x": false} {
		if got := validParent(p); got != want {
			t.Errorf("validParent(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestCwdDoesNotTellWhetherAHostPathExists is the probing attack: a symlink in current/ to a host
// path, passed as cwd, must get the same answer whether the host path exists or not (and the same
// as a plainly missing directory).
func TestCwdDoesNotTellWhetherAHostPathExists(t *testing.T) {
	cur := t.TempDir()
	must(t, os.Symlink("/etc", filepath.Join(cur, "probe")))
	_, errExists := resolveCwd(cur, "probe")
	must(t, os.Remove(filepath.Join(cur, "probe")))
	must(t, os.Symlink("/nonexistent-allox-probe", filepath.Join(cur, "probe")))
	_, errMissing := resolveCwd(cur, "probe")
	must(t, os.Remove(filepath.Join(cur, "probe")))
	_, errPlain := resolveCwd(cur, "probe")
	if errExists == nil || errMissing == nil || errPlain == nil {
		t.Fatalf("resolveCwd accepted a probe: %v / %v / %v", errExists, errMissing, errPlain)
	}
	if errExists.Error() != errMissing.Error() || errMissing.Error() != errPlain.Error() {
		t.Errorf("answers differ, so the probe learns whether the host path exists:\n%v\n%v\n%v", errExists, errMissing, errPlain)
	}
}

func TestCheckArgSize(t *testing.T) {
	ws := Workspace{Current: "/w/current", Shared: "/w/shared", AgentDir: "/w"}
	long := string(make([]byte, maxArgStrlen))
	tests := []struct {
		name  string
		req   StartRequest
		limit int
		field string // "" = accepted
	}{
		{"small", StartRequest{Argv: []string{"/bin/true"}}, minArgMax, ""},
		{"one argument too long", StartRequest{Argv: []string{"/bin/echo", long}}, maxArgMax, "argv"},
		{"one variable too long", StartRequest{Argv: []string{"/bin/true"}, Env: map[string]string{"X": long}}, maxArgMax, "env"},
		{"total over the limit", StartRequest{Argv: []string{"/bin/echo", long[:60000], long[:60000], long[:60000]}}, minArgMax, "argv"},
		{"env counts towards the total", StartRequest{Argv: []string{"/bin/echo", long[:100000]}, Env: map[string]string{"X": long[:40000]}}, minArgMax, "argv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Workspace = ws
			err := checkArgSize(&tt.req, tt.limit)
			var ie *InvalidError
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("checkArgSize = %v, want accepted", err)
			case tt.field != "" && (!errors.As(err, &ie) || ie.Field != tt.field):
				t.Errorf("checkArgSize = %v, want InvalidError on %q", err, tt.field)
			}
		})
	}
	if l := argMax(); l < minArgMax || l > maxArgMax {
		t.Errorf("argMax() = %d, want within [%d, %d]", l, minArgMax, maxArgMax)
	}
}
