package tracked

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBwrapArgs(t *testing.T) {
	cfg := &Config{SystemDirs: []string{"/usr"}, UnshareNet: true}
	req := &StartRequest{
		Workspace: Workspace{Current: "/w/a/workspace/sessions/s/current", Shared: "/w/a/workspace/shared", AgentDir: "/w/a/workspace"},
		Argv:      []string{"make", "-j2"},
		Env:       map[string]string{"PATH": "/opt/bin", "LANG": "C"},
	}
	got := bwrapArgs(cfg, req, "/w/a/workspace/sessions/s/current/src", "/records/r1/tmp")
	want := []string{
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--proc", "/proc", "--dev", "/dev", "--block-fd", "3", "--unshare-net",
		"--ro-bind", "/usr", "/usr",
		"--bind", "/records/r1/tmp", "/tmp",
		"--ro-bind", "/w/a/workspace/shared", "/w/a/workspace/shared",
		"--bind", "/w/a/workspace/sessions/s/current", "/w/a/workspace/sessions/s/current",
		"--chdir", "/w/a/workspace/sessions/s/current/src", "--clearenv",
		"--setenv", "ALLOX_AGENT_SHARED", "/w/a/workspace/shared",
		"--setenv", "ALLOX_AGENT_WORKSPACE", "/w/a/workspace",
		"--setenv", "HOME", "/w/a/workspace/sessions/s/current",
		"--setenv", "LANG", "C",
		"--setenv", "PATH", "/opt/bin",
		"--setenv", "TMPDIR", "/tmp",
		"--", "make", "-j2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bwrapArgs (-want +got):\n%s", diff)
	}
}
