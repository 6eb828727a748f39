package tracked

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBwrapArgs(t *testing.T) {
	cfg := &Config{SystemDirs: []string{"/usr"}, UnshareNet: true, RunUID: 2000, RunGID: 2001}
	req := &StartRequest{
		Workspace: Workspace{Current: "/w/a/workspace/sessions/s/current", Shared: "/w/a/workspace/shared", AgentDir: "/w/a/workspace"},
		Argv:      []string{"make", "-j2"},
		Env:       map[string]string{"PATH": "/opt/bin", "LANG": "C"},
	}
	got := bwrapArgs(cfg, req, "/w/a/workspace/sessions/s/current/src", "/records/r1/tmp", []string{"--ro-bind", "/proc/sys", "/proc/sys"})
	want := []string{
		"--unshare-user", "--uid", "2000", "--gid", "2001", "--disable-userns",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--proc", "/proc", "--dev", "/dev", "--block-fd", "3", "--add-seccomp-fd", "5", "--unshare-net",
		"--ro-bind", "/proc/sys", "/proc/sys",
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
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bwrapArgs (-want +got):\n%s", diff)
	}
}

func TestProcMasksNameOnlyWhatExists(t *testing.T) {
	exists := map[string]bool{"/proc/kcore": true, "/proc/acpi": true, "/proc/sys": true, "/proc/sysrq-trigger": true}
	stat := func(p string) (os.FileInfo, error) {
		if exists[p] {
			return nil, nil
		}
		return nil, os.ErrNotExist
	}
	want := []string{
		"--ro-bind", "/dev/null", "/proc/kcore",
		"--tmpfs", "/proc/acpi", "--remount-ro", "/proc/acpi",
		"--ro-bind", "/proc/sys", "/proc/sys",
		"--ro-bind", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
	}
	if diff := cmp.Diff(want, procMasks(stat)); diff != "" {
		t.Errorf("procMasks (-want +got):\n%s", diff)
	}
}
