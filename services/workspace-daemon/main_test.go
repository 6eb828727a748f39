package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/system"
)

// build compiles the daemon once per test binary into a temporary directory.
func build(t testing.TB) string {
	t.Helper()
	bin, err := built()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildProcessTree returns the daemon built with the eBPF process-tree provider linked in, as mkimage
// builds it for a service with plugins = ["process-tree"].
func buildProcessTree(t testing.TB) string {
	t.Helper()
	bin, err := builtProcessTree()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var (
	built            = sync.OnceValues(func() (string, error) { return goBuild("") })
	builtProcessTree = sync.OnceValues(func() (string, error) { return goBuild("allox_process_tree") })
)

func goBuild(tags string) (string, error) {
	dir, err := os.MkdirTemp("", "allox-workspace-daemon-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "allox-workspace-daemon")
	out, err := exec.Command("go", "build", "-tags", tags, "-ldflags", "-X main.version=v9.9.9-test", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build -tags %q: %w\n%s", tags, err, out)
	}
	return bin, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range []func() (string, error){built, builtProcessTree, builtSessionNetwork, builtSessionShare, builtClient} {
		if bin, err := b(); err == nil {
			os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

// testCgroupParent is a cgroup parent of the test's own (the same across its daemon's restarts):
// daemons of tests run at the same time (go test runs packages in parallel) must not share one,
// since a daemon removes the groups of sessions its store does not have. It is removed when the
// test ends.
func testCgroupParent(t testing.TB, suffix ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(append([]string{t.Name()}, suffix...), "/")))
	name := "allox-test-" + hex.EncodeToString(sum[:6])
	t.Cleanup(func() { removeCgroupTree(t, name) })
	return name
}

// removeCgroupTree removes an empty cgroup tree below the cgroup2 mount, deepest first.
func removeCgroupTree(t testing.TB, name string) {
	for _, mount := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(mount, name), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Logf("cgroup %s left: %v", dirs[i], err)
			}
		}
	}
}

var listening = regexp.MustCompile(`msg=listening .*listener=(\w+) addr=(\S+)`)

// start runs the daemon and waits until it reports its listeners; stderr goes to t.Logf.
func start(t testing.TB, bin string, want int, args ...string) (*exec.Cmd, func() error, map[string]string) {
	t.Helper()
	if !slices.Contains(args, "--cgroup-parent") {
		args = append(args, "--cgroup-parent", testCgroupParent(t))
	}
	args = withSessionSockets(t, args)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started: %s %s", bin, strings.Join(args, " "))
	addrs := make(chan [2]string, 8)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		defer close(addrs)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log("daemon: " + sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrs <- [2]string{m[1], m[2]}:
				default:
				}
			}
		}
	}()
	// wait reads stderr to its end before reaping (as exec.Cmd requires), so nothing logs after
	// the test ends.
	wait := sync.OnceValue(func() error { <-logged; return cmd.Wait() })
	t.Cleanup(func() { cmd.Process.Kill(); wait() })
	got := map[string]string{}
	timeout := time.After(30 * time.Second)
	for len(got) < want {
		select {
		case a, ok := <-addrs:
			if !ok {
				t.Fatalf("the daemon exited before listening (have %v)", got)
			}
			got[a[0]] = a[1]
		case <-timeout:
			t.Fatalf("the daemon did not report %d listeners in 30s (have %v)", want, got)
		}
	}
	return cmd, wait, got
}

func TestDaemonBinary(t *testing.T) {
	bin := build(t)
	root, secret := t.TempDir(), t.TempDir()
	tokenFile := filepath.Join(secret, "rpc-token")
	const token = "binary-test-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, wait, addrs := start(t, bin, 2, "--system-only", "--root", root, "--listen", "127.0.0.1:0", "--listen-host", "127.0.0.1:0", "--token-file", tokenFile)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	loop := rpc.NewClient("http://"+addrs["loopback"], "", nil)
	host := rpc.NewClient("http://"+addrs["host"], token, nil)

	t.Run("system.info", func(t *testing.T) {
		var info rpc.SystemInfo
		if err := loop.Call(ctx, rpc.ActionSystemInfo, nil, &info); err != nil {
			t.Fatal(err)
		}
		checkInfo(t, root, &info)
	})
	t.Run("system.kernel_config", func(t *testing.T) {
		var kc rpc.KernelConfig
		err := loop.Call(ctx, rpc.ActionSystemKernelConfig, nil, &kc)
		if _, statErr := os.Stat("/proc/config.gz"); statErr != nil {
			if !errors.Is(err, rpc.CodeUnsupported) {
				t.Errorf("without /proc/config.gz: %v, want unsupported", err)
			}
			return
		}
		if err != nil || !strings.Contains(kc.Config, "\nCONFIG_") {
			t.Errorf("system.kernel_config = %d bytes, %v; want the kernel's .config", len(kc.Config), err)
		}
	})
	t.Run("errors", func(t *testing.T) {
		err := loop.Call(ctx, rpc.ActionSystemInfo, map[string]bool{"verbose": true}, nil)
		var e *rpc.Error
		if !errors.As(err, &e) || e.Code != rpc.CodeInvalidParams || e.Field != "params.verbose" || e.Status != 400 {
			t.Errorf("unknown param: %v", err)
		}
		if err := loop.Call(ctx, rpc.ActionSystemPowerOff, nil, nil); !errors.Is(err, rpc.CodeForbidden) {
			t.Errorf("poweroff on loopback = %v, want forbidden", err)
		}
		if err := rpc.NewClient("http://"+addrs["host"], "wrong", nil).Call(ctx, rpc.ActionSystemInfo, nil, nil); !errors.Is(err, rpc.CodeUnauthorized) {
			t.Errorf("host with a wrong token = %v, want unauthorized", err)
		}
		if err := rpc.NewClient("http://"+addrs["host"], "", nil).Call(ctx, rpc.ActionSystemInfo, nil, nil); !errors.Is(err, rpc.CodeUnauthorized) {
			t.Errorf("host without a token = %v, want unauthorized", err)
		}
		// The daemon's parent is this test, not PID 1, so the real power-off is refused.
		if os.Getpid() != 1 {
			if err := host.Call(ctx, rpc.ActionSystemPowerOff, nil, nil); !errors.Is(err, rpc.CodeUnsupported) {
				t.Errorf("poweroff on host outside the guest = %v, want unsupported", err)
			}
		}
	})
	if err := host.Call(ctx, rpc.ActionSystemInfo, nil, nil); err != nil {
		t.Errorf("host with the token: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not exit within 20s of SIGTERM")
	}
}

// checkInfo compares system.info with what this machine's kernel says.
func checkInfo(t *testing.T, root string, info *rpc.SystemInfo) {
	t.Helper()
	var u unix.Utsname
	var st, cg unix.Statfs_t
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	cgVersion := 0
	if unix.Statfs("/sys/fs/cgroup", &cg) == nil && cg.Type == unix.CGROUP2_SUPER_MAGIC {
		cgVersion = 2
	}
	for _, c := range []struct{ name, got, want string }{
		{"daemon.version", info.Daemon.Version, "v9.9.9-test"},
		{"kernel.release", info.Kernel.Release, unix.ByteSliceToString(u.Release[:])},
		{"kernel.version", info.Kernel.Version, unix.ByteSliceToString(u.Version[:])},
		{"kernel.machine", info.Kernel.Machine, unix.ByteSliceToString(u.Machine[:])},
		{"store.root", info.Store.Root, root},
		{"store.fstype", info.Store.FSType, system.FSTypeName(uint32(st.Type))},
		{"boot_id", info.BootID, strings.TrimSpace(string(bootID))},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if info.Cgroup.Version != cgVersion || info.Cgroup.Controllers == nil || info.Cgroup.SubtreeControl == nil {
		t.Errorf("cgroup = %+v, want version %d and non-null lists", info.Cgroup, cgVersion)
	}
	if _, err := os.Stat("/etc/allox/manifest.json"); err != nil && info.Image != nil {
		t.Errorf("image = %+v without a manifest", info.Image)
	}
}

func TestDaemonBinaryUsage(t *testing.T) {
	bin := build(t)
	for _, tt := range []struct {
		args      []string
		exit      int
		inMessage string
	}{
		{[]string{"-h"}, 0, "-listen-host address"},
		{[]string{"--root", t.TempDir(), "--listen", "0.0.0.0:0"}, 2, "use --listen-host 0.0.0.0:0 with --token-file"},
		{[]string{"--listen", "127.0.0.1:0"}, 2, "--root is required"},
	} {
		out, err := exec.Command(bin, tt.args...).CombinedOutput()
		exit := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		}
		if exit != tt.exit || !strings.Contains(string(out), tt.inMessage) {
			t.Errorf("%v: exit %d, output:\n%s\nwant exit %d and %q", tt.args, exit, out, tt.exit, tt.inMessage)
		}
	}
}
