package seccomp

import (
	"bytes"
	"github.com/allox-os/allox/internal/testenv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// needSandbox skips (or, with CI=true, fails) unless the real thing is here: root, to run
// bwrap with the capabilities whose use the filter must stop, and bwrap itself.
func needSandbox(t *testing.T) {
	t.Helper()
	testenv.Root(t, "so that the unfiltered control calls reach the kernel", "./services/internal/seccomp")
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap")
}

// probeDir holds the probe binary once a test has built it; TestMain removes it.
var probeDir string

// probeBinary builds testdata/probe once, statically, for binding into sandboxes.
var probeBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "seccomp-probe-")
	if err != nil {
		return "", err
	}
	probeDir = dir
	out := filepath.Join(dir, "probe")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, "build", "-o", out, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", &exec.ExitError{Stderr: b}
	}
	return out, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if probeDir != "" {
		os.RemoveAll(probeDir)
	}
	os.Exit(code)
}

// sandbox is a bwrap command line as a run gets it, with or without the filter.
type sandbox struct {
	filtered bool
	binds    []string // extra bwrap arguments, e.g. --bind SRC DST
}

// run runs argv in the sandbox and returns its stdout, stderr and exit error.
func (s sandbox) run(t *testing.T, argv ...string) (string, string, error) {
	t.Helper()
	probe, err := probeBinary()
	if err != nil {
		t.Fatalf("build testdata/probe: %v: %s", err, err.(*exec.ExitError).Stderr)
	}
	args := []string{
		"--unshare-pid", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", probe, "/probe",
	}
	args = append(args, s.binds...)
	cmd := exec.Command("bwrap")
	if s.filtered {
		f, err := File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f} // fd 3 in bwrap
		args = append(args, "--seccomp", "3")
	}
	cmd.Args = append(append(append(cmd.Args, args...), "--"), argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// probe runs the named probes in the sandbox and returns each one's errno.
func (s sandbox) probe(t *testing.T, extra []string, names ...string) map[string]syscall.Errno {
	t.Helper()
	stdout, stderr, err := s.run(t, append(append([]string{"/probe"}, extra...), names...)...)
	if err != nil {
		t.Fatalf("probe in bwrap (filtered=%v): %v\nstdout:\n%s\nstderr:\n%s", s.filtered, err, stdout, stderr)
	}
	got := map[string]syscall.Errno{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		name, errno, ok := strings.Cut(line, " ")
		n, err := strconv.Atoi(errno)
		if !ok || err != nil {
			t.Fatalf("probe (filtered=%v): %q\nstderr:\n%s", s.filtered, line, stderr)
		}
		got[name] = syscall.Errno(n)
	}
	return got
}

func errnoName(e syscall.Errno) string {
	if e == 0 {
		return "success"
	}
	return e.Error() + " (" + strconv.Itoa(int(e)) + ")"
}

// attacks names each probe and the errno the filter must give it.
var attacks = []struct {
	probe string
	want  syscall.Errno
}{
	{"bpf", syscall.EPERM}, {"perf_event_open", syscall.EPERM},
	{"kexec_load", syscall.EPERM}, {"kexec_file_load", syscall.EPERM},
	{"init_module", syscall.EPERM}, {"finit_module", syscall.EPERM}, {"delete_module", syscall.EPERM},
	{"create_module", syscall.EPERM}, {"get_kernel_syms", syscall.EPERM}, {"query_module", syscall.EPERM},
	{"uselib", syscall.EPERM}, {"_sysctl", syscall.EPERM}, {"lookup_dcookie", syscall.EPERM},
	{"syslog", syscall.EPERM}, {"kcmp", syscall.EPERM}, {"userfaultfd", syscall.EPERM},
	{"io_uring_setup", syscall.EPERM}, {"io_uring_enter", syscall.EPERM}, {"io_uring_register", syscall.EPERM},
	{"open_by_handle_at", syscall.EPERM}, {"name_to_handle_at", syscall.EPERM},
	{"add_key", syscall.EPERM}, {"request_key", syscall.EPERM}, {"keyctl", syscall.EPERM},
	{"mount", syscall.EPERM}, {"umount2", syscall.EPERM}, {"pivot_root", syscall.EPERM},
	{"move_mount", syscall.EPERM}, {"open_tree", syscall.EPERM}, {"fsopen", syscall.EPERM},
	{"fsconfig", syscall.EPERM}, {"fsmount", syscall.EPERM}, {"fspick", syscall.EPERM}, {"mount_setattr", syscall.EPERM},
	{"reboot", syscall.EPERM}, {"swapon", syscall.EPERM}, {"swapoff", syscall.EPERM}, {"acct", syscall.EPERM},
	{"quotactl", syscall.EPERM}, {"quotactl_fd", syscall.EPERM}, {"nfsservctl", syscall.EPERM}, {"vhangup", syscall.EPERM},
	{"settimeofday", syscall.EPERM}, {"clock_settime", syscall.EPERM}, {"clock_adjtime", syscall.EPERM}, {"adjtimex", syscall.EPERM},
	{"iopl", syscall.EPERM}, {"ioperm", syscall.EPERM}, {"setns", syscall.EPERM}, {"personality", syscall.EPERM},
	{"clone3", syscall.ENOSYS},
	{"clone/CLONE_NEWUSER", syscall.EPERM}, {"clone/CLONE_NEWNS", syscall.EPERM}, {"clone/CLONE_NEWNET", syscall.EPERM},
	{"clone/CLONE_NEWPID", syscall.EPERM}, {"clone/CLONE_NEWIPC", syscall.EPERM}, {"clone/CLONE_NEWUTS", syscall.EPERM},
	{"clone/CLONE_NEWCGROUP", syscall.EPERM}, {"clone/CLONE_NEWTIME", syscall.EPERM},
	{"unshare/CLONE_NEWUSER", syscall.EPERM}, {"unshare/CLONE_NEWNS", syscall.EPERM}, {"unshare/CLONE_NEWNET", syscall.EPERM},
	{"unshare/CLONE_NEWPID", syscall.EPERM}, {"unshare/CLONE_NEWIPC", syscall.EPERM}, {"unshare/CLONE_NEWUTS", syscall.EPERM},
	{"unshare/CLONE_NEWCGROUP", syscall.EPERM}, {"unshare/CLONE_NEWTIME", syscall.EPERM},
	{"socket/AF_VSOCK", syscall.EPERM}, {"socket/AF_VSOCK-high-bits", syscall.EPERM}, {"socketpair/AF_VSOCK", syscall.EPERM},
	{"abi/i386-int80", syscall.EPERM}, {"abi/x32", syscall.EPERM},
}

// TestAttacks makes each denied call from inside a filtered bwrap, as root, and fails unless
// the filter refuses it. The same probe in the same bwrap without the filter is the control:
// it must get another answer, which shows the call reaches the kernel and that EPERM is the
// filter's, not a missing capability's.
func TestAttacks(t *testing.T) {
	needSandbox(t)
	names := make([]string, len(attacks))
	for i, a := range attacks {
		names[i] = a.probe
	}
	filtered := sandbox{filtered: true}.probe(t, nil, names...)
	control := sandbox{}.probe(t, nil, names...)
	for _, a := range attacks {
		t.Run(a.probe, func(t *testing.T) {
			got, ok := filtered[a.probe]
			if !ok {
				t.Fatalf("probe %s gave no answer in the filtered sandbox", a.probe)
			}
			if got != a.want {
				t.Errorf("filtered: %s, want %s: the attack is not refused by the filter", errnoName(got), errnoName(a.want))
			}
			if c := control[a.probe]; c == a.want {
				t.Errorf("unfiltered control: %s too; the probe proves nothing about the filter (choose arguments that fail otherwise)", errnoName(c))
			} else {
				t.Logf("filtered: %s; unfiltered: %s", errnoName(got), errnoName(c))
			}
		})
	}
}

// TestOrdinaryWork checks that what runs do every day works under the filter.
func TestOrdinaryWork(t *testing.T) {
	needSandbox(t)
	s := sandbox{filtered: true}
	t.Run("shell", func(t *testing.T) {
		stdout, stderr, err := s.run(t, "/bin/sh", "-c", "echo hi > /tmp/x && cat /tmp/x")
		if err != nil || stdout != "hi\n" {
			t.Fatalf("sh: %v, stdout %q, stderr %q", err, stdout, stderr)
		}
	})
	names := []string{"ok/socket-AF_INET6", "ok/socket-AF_UNIX", "ok/tcp-loopback", "ok/exec-true",
		"ok/personality-query", "ok/unshare-files", "ok/ioctl-pipe-FIONREAD"}
	got := s.probe(t, nil, names...)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			if e, ok := got[n]; !ok || e != 0 {
				t.Errorf("filtered: %s (answered: %v), want success", errnoName(e), ok)
			}
		})
	}
}

func TestFile(t *testing.T) {
	f, err := File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Program()
	if !bytes.Equal(got, want) {
		t.Fatalf("File holds %d bytes, Program %d", len(got), len(want))
	}
	if _, err := f.WriteAt([]byte{0}, 0); err == nil {
		t.Fatal("File is writable; it must be sealed")
	}
}
