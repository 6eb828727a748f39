package boot

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func testManifest() *manifest.Manifest {
	return &manifest.Manifest{
		Version:  manifest.Version,
		Hostname: "allox",
		Store:    manifest.Store{Serial: "allox-ws", Mountpoint: "/var/lib/allox/workspaces", Label: "allox-ws", FallbackSizeMiB: 512},
		Network:  &manifest.Network{Interface: "eth0", Address: "10.0.2.15/24", Gateway: "10.0.2.2"},
		FwCfg:    []manifest.FwCfg{{Name: "opt/allox/rpc-token", Path: "/run/allox/rpc-token", Mode: 0o600}},
		Services: []manifest.Service{{Name: "workspace-daemon", Command: []string{"/usr/bin/allox-workspace-daemon", "--root", "/w"}}},
	}
}

// tableText is the boot log as init prints it: one line per step, optional ones marked.
func tableText(steps []Step) string {
	var b strings.Builder
	for _, s := range steps {
		if !Required(s) {
			b.WriteString("(optional) ")
		}
		b.WriteString(s.String() + "\n")
	}
	return b.String()
}

func TestTableGolden(t *testing.T) {
	steps := append(Early(), ReadManifest{Path: manifest.Path})
	m := testManifest()
	got := tableText(append(append(steps, Late(m)...), StoreSteps(m)...))
	golden := filepath.Join("testdata", "steps.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./init/internal/boot -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("step table (-golden +got); if intended run with -update:\n%s", diff)
	}
}

func TestLateWithoutNetwork(t *testing.T) {
	m := testManifest()
	m.Network, m.FwCfg, m.Services = &manifest.Network{Interface: "eth0"}, nil, nil
	got := tableText(Late(m))
	want := "(optional) hostname allox\nip link set lo up\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Late (-want +got):\n%s", diff)
	}
}

func TestEarlyOnFakeRoot(t *testing.T) {
	f := &fake{}
	sys := f.sys(t)
	write(t, sys.Root, "/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
	write(t, sys.Root, "/sys/fs/cgroup/cgroup.subtree_control", "")
	var lines []string
	err := Run(context.Background(), sys, Early(), func(r Result) {
		if r.Done && r.Err != nil {
			lines = append(lines, r.Step.String()+": "+r.Err.Error())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 {
		t.Errorf("step failures: %q", lines)
	}
	if got := sys.Mounts(); len(got) != 10 || got[0] != filepath.Join(sys.Root, "/proc") {
		t.Errorf("Mounts() = %q, want 10 mounts starting with /proc", got)
	}
	if l, err := os.Readlink(filepath.Join(sys.Root, "/dev/ptmx")); err != nil || l != "pts/ptmx" {
		t.Errorf("/dev/ptmx -> %q, %v; want pts/ptmx", l, err)
	}
	if fi, err := os.Stat(filepath.Join(sys.Root, LogDir)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("log dir: %v, %v", fi, err)
	}
}

func TestRunStopsAtRequiredFailure(t *testing.T) {
	f := &fake{failHost: errors.New("EPERM")}
	sys := f.sys(t)
	steps := []Step{Opt{Hostname{"a"}}, Hostname{"b"}, Hostname{"c"}}
	var done []string
	err := Run(context.Background(), sys, steps, func(r Result) {
		if r.Done {
			done = append(done, r.Step.String())
		}
	})
	var se *StepError
	if !errors.As(err, &se) || se.Error() != "hostname b: EPERM" {
		t.Fatalf("Run = %v, want StepError \"hostname b: EPERM\"", err)
	}
	if diff := cmp.Diff([]string{"hostname a", "hostname b"}, done); diff != "" {
		t.Errorf("steps run (-want +got):\n%s", diff)
	}
}

func TestRunSkippedRequiredStepContinues(t *testing.T) {
	sys := (&fake{}).sys(t)
	if err := Run(context.Background(), sys, []Step{Hostname{""}}, nil); err != nil {
		t.Fatalf("a skipped required step failed the run: %v", err)
	}
}

func TestRunHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, (&fake{}).sys(t), Early(), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

func TestMountAlreadyMounted(t *testing.T) {
	sys := (&fake{}).sys(t)
	sys.Mount = func(string, string, string, uintptr, string) error { return unix.EBUSY }
	err := Mount{"devtmpfs", "/dev", "devtmpfs", 0, ""}.Run(context.Background(), sys)
	if !errors.Is(err, ErrSkipped) || len(sys.Mounts()) != 0 {
		t.Fatalf("Run = %v, mounts %q; want a skip and no recorded mount", err, sys.Mounts())
	}
}

// TestRootMount checks that the step leaves the initramfs through Sys.LeaveRootfs and stops the
// boot when that fails (every sandbox would fail after it).
func TestRootMount(t *testing.T) {
	called := 0
	sys := &Sys{LeaveRootfs: func() (bool, error) { called++; return true, nil }}
	if err := (RootMount{}).Run(context.Background(), sys); err != nil || called != 1 {
		t.Fatalf("Run = %v after %d calls, want nil after 1", err, called)
	}
	boom := errors.New("bind / failed")
	sys.LeaveRootfs = func() (bool, error) { return false, boom }
	if err := (RootMount{}).Run(context.Background(), sys); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the failure", err)
	}
	if !Required(RootMount{}) {
		t.Error("RootMount must be required")
	}
}

func TestRaiseSysctl(t *testing.T) {
	f := &fake{}
	sys := f.sys(t)
	write(t, sys.Root, "/proc/sys/fs/nr_open", "1048576\n")
	step := RaiseSysctl{"fs/nr_open", 1 << 30}
	if got, want := step.String(), "sysctl fs.nr_open >= 1073741824"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if err := step.Run(context.Background(), sys); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(sys.Root, "proc/sys/fs/nr_open")); string(b) != "1073741824" {
		t.Errorf("nr_open = %q, want 1073741824", b)
	}
	if err := (RaiseSysctl{"fs/nr_open", 4096}).Run(context.Background(), sys); !errors.Is(err, ErrSkipped) {
		t.Errorf("lowering: %v; want a skip that leaves the larger value", err)
	}
}
