package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/daemontest"
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

func goBuild(tags string) (string, error) { return daemontest.Build(tags) }

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range []func() (string, error){built, builtProcessTree, builtSessionNetwork, builtSessionShare, builtDialog, builtClient} {
		if bin, err := b(); err == nil {
			os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

// testCgroupParent is a cgroup parent of the test's own (daemontest.CgroupParent).
func testCgroupParent(t testing.TB, suffix ...string) string {
	return daemontest.CgroupParent(t, suffix...)
}

// start runs the daemon and waits until it reports its listeners; stderr goes to t.Logf. The
// daemon gets its own --session-sockets and the built --client unless args name them.
func start(t testing.TB, bin string, want int, args ...string) (*exec.Cmd, func() error, map[string]string) {
	t.Helper()
	return daemontest.Start(t, bin, want, withSessionSockets(t, args)...)
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
