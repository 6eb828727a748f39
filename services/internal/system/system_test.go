package system

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/manifest"
)

// fake returns a System over a temporary /proc, /sys and /etc with fake kernel queries: the store
// is btrfs and /sys/fs/cgroup is cgroup2.
func fake(t *testing.T) *System {
	t.Helper()
	dir := t.TempDir()
	s := &System{
		Root:         filepath.Join(dir, "store"),
		ProcDir:      filepath.Join(dir, "proc"),
		SysDir:       filepath.Join(dir, "sys"),
		ManifestPath: filepath.Join(dir, "etc/allox/manifest.json"),
		Version:      "v1.2.3",
		Uname: func() (Kernel, error) {
			return Kernel{Release: "6.18.2-allox", Version: "#1 SMP PREEMPT_DYNAMIC", Machine: "x86_64"}, nil
		},
		Statfs: func(path string) (uint32, error) {
			switch path {
			case filepath.Join(dir, "store"):
				return unix.BTRFS_SUPER_MAGIC, nil
			case filepath.Join(dir, "sys/fs/cgroup"):
				return unix.CGROUP2_SUPER_MAGIC, nil
			}
			return 0, &fs.PathError{Op: "statfs", Path: path, Err: fs.ErrNotExist}
		},
		Getppid:  func() int { return 1 },
		PowerOff: func() error { return nil },
	}
	write(t, filepath.Join(s.ProcDir, "sys/kernel/random/boot_id"), "0f6c0c3e-3f5c-4c0e-9a53-1d0c2b7f7a10\n")
	write(t, filepath.Join(s.SysDir, "fs/cgroup/cgroup.controllers"), "cpuset cpu io memory pids\n")
	write(t, filepath.Join(s.SysDir, "fs/cgroup/cgroup.subtree_control"), "cpu memory\n")
	return s
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInfo(t *testing.T) {
	s := fake(t)
	var buf bytes.Buffer
	m := &manifest.Manifest{Version: manifest.Version, Image: manifest.Image{Name: "allox-agent", Version: "0.1.0"},
		Store: manifest.Store{Mountpoint: "/var/lib/allox/workspaces"}}
	if err := manifest.Encode(&buf, m); err != nil {
		t.Fatal(err)
	}
	write(t, s.ManifestPath, buf.String())

	got, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	want := &Info{
		Version: "v1.2.3",
		Image:   &manifest.Image{Name: "allox-agent", Version: "0.1.0"},
		Kernel:  Kernel{Release: "6.18.2-allox", Version: "#1 SMP PREEMPT_DYNAMIC", Machine: "x86_64"},
		Store:   Store{Root: s.Root, FSType: "btrfs"},
		Cgroup:  Cgroup{Version: 2, Controllers: []string{"cpuset", "cpu", "io", "memory", "pids"}, SubtreeControl: []string{"cpu", "memory"}},
		BootID:  "0f6c0c3e-3f5c-4c0e-9a53-1d0c2b7f7a10",
		Self:    Self{Pid: os.Getpid()},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Info mismatch (-want +got):\n%s", diff)
	}
}

func TestInfoWithoutManifestOrCgroup2(t *testing.T) {
	s := fake(t)
	statfs := s.Statfs
	s.Statfs = func(path string) (uint32, error) {
		if strings.HasSuffix(path, "fs/cgroup") {
			return unix.TMPFS_MAGIC, nil // a cgroup v1 layout
		}
		return statfs(path)
	}
	got, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if got.Image != nil {
		t.Errorf("Image = %+v, want nil without a manifest", got.Image)
	}
	if diff := cmp.Diff(Cgroup{Controllers: []string{}, SubtreeControl: []string{}}, got.Cgroup); diff != "" {
		t.Errorf("Cgroup mismatch (-want +got):\n%s", diff)
	}
}

func TestInfoBadManifest(t *testing.T) {
	s := fake(t)
	write(t, s.ManifestPath, `{"version": 99}`)
	if _, err := s.Info(); err == nil || !strings.Contains(err.Error(), s.ManifestPath) {
		t.Errorf("Info with a bad manifest = %v, want an error naming %s", err, s.ManifestPath)
	}
}

func TestKernelConfig(t *testing.T) {
	s := fake(t)
	if _, err := s.KernelConfig(); !errors.Is(err, ErrNoKernelConfig) {
		t.Fatalf("KernelConfig without config.gz = %v, want ErrNoKernelConfig", err)
	}
	const config = "CONFIG_IKCONFIG=y\nCONFIG_IKCONFIG_PROC=y\n# CONFIG_MODULES is not set\n"
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(config))
	zw.Close()
	write(t, filepath.Join(s.ProcDir, "config.gz"), buf.String())
	got, err := s.KernelConfig()
	if err != nil || got != config {
		t.Errorf("KernelConfig = %q, %v; want %q", got, err, config)
	}

	write(t, filepath.Join(s.ProcDir, "config.gz"), "not gzip")
	if _, err := s.KernelConfig(); err == nil || errors.Is(err, ErrNoKernelConfig) {
		t.Errorf("KernelConfig of a corrupt file = %v, want a decompression error", err)
	}
}

func TestCheckPowerOff(t *testing.T) {
	s := fake(t)
	if err := s.CheckPowerOff(); err != nil {
		t.Errorf("CheckPowerOff under init: %v", err)
	}
	s.Getppid = func() int { return 4242 }
	if err := s.CheckPowerOff(); !errors.Is(err, ErrNotUnderInit) || !strings.Contains(err.Error(), "4242") {
		t.Errorf("CheckPowerOff under pid 4242 = %v, want ErrNotUnderInit naming the parent", err)
	}
}

func TestFSTypeName(t *testing.T) {
	for magic, want := range map[uint32]string{
		unix.BTRFS_SUPER_MAGIC: "btrfs", unix.TMPFS_MAGIC: "tmpfs", unix.EXT4_SUPER_MAGIC: "ext4",
		unix.CGROUP2_SUPER_MAGIC: "cgroup2", 0x1234abcd: "0x1234abcd",
	} {
		if got := FSTypeName(magic); got != want {
			t.Errorf("FSTypeName(%#x) = %q, want %q", magic, got, want)
		}
	}
}

// TestInfoRealHost runs Info against this machine's real /proc, /sys and kernel.
func TestInfoRealHost(t *testing.T) {
	root := t.TempDir()
	s := New(root, "test")
	s.ManifestPath = filepath.Join(root, "no-manifest.json")
	got, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	want := Kernel{Release: unix.ByteSliceToString(u.Release[:]), Version: unix.ByteSliceToString(u.Version[:]), Machine: unix.ByteSliceToString(u.Machine[:])}
	if diff := cmp.Diff(want, got.Kernel); diff != "" {
		t.Errorf("Kernel mismatch (-uname +Info):\n%s", diff)
	}
	if wantFS := FSTypeName(uint32(st.Type)); got.Store.FSType != wantFS {
		t.Errorf("Store.FSType = %q, want %q", got.Store.FSType, wantFS)
	}
	if len(got.BootID) != 36 {
		t.Errorf("BootID = %q, want a UUID", got.BootID)
	}
	var cg unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &cg) == nil && cg.Type == unix.CGROUP2_SUPER_MAGIC {
		if got.Cgroup.Version != 2 {
			t.Errorf("Cgroup.Version = %d on a cgroup2 host, want 2", got.Cgroup.Version)
		}
	}
}

func TestSelfAndTasks(t *testing.T) {
	proc, sys := t.TempDir(), t.TempDir()
	for p, v := range map[string]string{
		proc + "/self/cgroup":                                 "0::/system/workspace-daemon\n",
		proc + "/self/oom_score_adj":                          "-997\n",
		proc + "/loadavg":                                     "0.10 0.20 0.30 2/137 4242\n",
		sys + "/fs/cgroup/system/workspace-daemon/memory.low": "67108864\n",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &System{ProcDir: proc, SysDir: sys}
	me := s.self()
	if me.Cgroup != "/system/workspace-daemon" || me.MemoryLow != "67108864" || me.MemoryMin != "" || me.OOMScoreAdj != -997 || me.Pid != os.Getpid() {
		t.Errorf("self = %+v", me)
	}
	if n := s.tasks(); n != 137 {
		t.Errorf("tasks = %d, want 137", n)
	}
}
