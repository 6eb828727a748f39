package capture

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/cgroup/cgrouptest"
	"github.com/allox-os/allox/services/internal/effects/scope"
	"github.com/allox-os/allox/services/internal/effects/verdict"
)

func TestWorkspaceEffectsAndSharedChange(t *testing.T) {
	r := observe(t, nil, "", func(cfg *Config) {
		must(t, os.WriteFile(filepath.Join(cfg.Workspace, "effect.txt"), []byte("changed"), 0o644))
	})
	if r.Verdict != verdict.Consistent || len(r.Run.Effects) != 1 || r.Run.Effects[0].Key != "effect.txt" ||
		!strings.Contains(r.Run.Effects[0].After, "size=7 sha256=") {
		t.Fatalf("verdict %s effects %+v, want CONSISTENT with effect.txt (7 bytes, hashed) as the run's effect", r.Verdict, r.Run.Effects)
	}
	r = observe(t, nil, "", func(cfg *Config) {
		must(t, os.Symlink("../current", filepath.Join(cfg.Shared, "link")))
	})
	if c := named(t, r, scope.Shared, verdict.Added, "link"); !strings.Contains(c.After, "-> ../current") {
		t.Errorf("shared change %+v does not name the symlink target", c)
	}
}

func TestSysctlChangeIsNamed(t *testing.T) {
	requireRoot(t)
	const p = "/proc/sys/kernel/msgmni" // other packages' tests change msgmax and msgmnb
	old, err := os.ReadFile(p)
	must(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(old)))
	must(t, err)
	t.Cleanup(func() { must(t, os.WriteFile(p, old, 0)) })
	r := observe(t, &scope.Scope{Sysctl: &scope.Keys{Prefixes: []string{"kernel."}}}, "", func(*Config) {
		must(t, os.WriteFile(p, []byte(strconv.Itoa(n+1)), 0))
	})
	c := named(t, r, scope.Sysctl, verdict.Changed, "kernel.msgmni")
	if c.Before != strconv.Itoa(n) || c.After != strconv.Itoa(n+1) {
		t.Errorf("kernel.msgmni change %+v, want %d → %d", c, n, n+1)
	}
}

// TestSysctlsStableWithoutChange proves the volatile list: with nothing
// changed, two captures a second apart are equal, except for the keys that
// this repository's tests in other packages change on purpose and may be
// changing right now.
func TestSysctlsStableWithoutChange(t *testing.T) {
	requireRoot(t)
	changedByTests := map[string]bool{"kernel.msgmax": true, "kernel.msgmnb": true, "kernel.msgmni": true}
	r := observe(t, &scope.Scope{Sysctl: &scope.Keys{Prefixes: []string{"kernel.", "fs.", "vm.", "user.", "dev."}}}, "", func(*Config) {
		time.Sleep(time.Second)
	})
	for _, d := range r.Run.Domains {
		for _, c := range d.Changes {
			if !changedByTests[c.Key] {
				t.Errorf("%s changed by itself: %+v", d.Domain, c)
			}
		}
		if d.Verdict == verdict.Inconclusive {
			t.Errorf("%s inconclusive: %s", d.Domain, d.Reason)
		}
	}
}

func TestTmpfsMountIsNamed(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	r := observe(t, &scope.Scope{Mounts: true}, "", func(*Config) {
		must(t, unix.Mount("allox-effects-test", dir, "tmpfs", 0, "size=1m"))
		t.Cleanup(func() { must(t, unix.Unmount(dir, unix.MNT_DETACH)) })
	})
	c := named(t, r, scope.Mounts, verdict.Added, dir)
	if !strings.Contains(c.After, "fstype=tmpfs source=allox-effects-test") {
		t.Errorf("mount change %+v, want the tmpfs and its source", c)
	}
}

// TestNetworkLinkIsNamed adds a bridge link: the host kernel (like many
// guest kernels) has no dummy link type, and a bridge needs no peer.
func TestNetworkLinkIsNamed(t *testing.T) {
	requireRoot(t)
	name := "alxfx" + suffix(t)
	r := observe(t, &scope.Scope{Network: true}, "", func(*Config) {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		must(t, netlink.LinkAdd(br))
		t.Cleanup(func() { must(t, netlink.LinkDel(br)) })
	})
	if c := named(t, r, scope.Network, verdict.Added, "link "+name); !strings.Contains(c.After, "type=bridge up=false") {
		t.Errorf("link change %+v, want a bridge that is down", c)
	}
}

func TestBPFObjectsAreNamed(t *testing.T) {
	requireRoot(t)
	name := "alxfx_" + suffix(t)
	r := observe(t, &scope.Scope{BPF: true}, "", func(*Config) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
		must(t, err)
		t.Cleanup(func() { m.Close() })
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.SocketFilter, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		must(t, err)
		t.Cleanup(func() { p.Close() })
	})
	named(t, r, scope.BPF, verdict.Added, "map Array/"+name+" key=4 value=8 max_entries=1")
	named(t, r, scope.BPF, verdict.Added, "prog SocketFilter/"+name+"/")
}

func TestNftablesTableIsNamed(t *testing.T) {
	requireRoot(t)
	name := "alxfx_" + suffix(t)
	r := observe(t, &scope.Scope{Network: true}, "", func(*Config) {
		c, err := nftables.New()
		must(t, err)
		tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
		ch := c.AddChain(&nftables.Chain{Name: "input", Table: tb})
		c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}})
		must(t, c.Flush())
		t.Cleanup(func() { c.DelTable(tb); must(t, c.Flush()) })
	})
	named(t, r, scope.Netfilter, verdict.Added, "table inet "+name)
	if c := named(t, r, scope.Netfilter, verdict.Added, "rule inet "+name+" input #0001"); !strings.Contains(c.After, "expr.Counter") {
		t.Errorf("rule %+v, want its counter expression", c)
	}
}

func TestModulesWithoutModuleSupport(t *testing.T) {
	_, err := os.Stat("/proc/modules")
	s := Modules("/proc/modules")
	switch {
	case errors.Is(err, os.ErrNotExist):
		if s.Unconfirmable != "" || s.Note != NoModuleSupport || len(s.Items) != 0 {
			t.Fatalf("no /proc/modules: %+v, want the definite note %q", s, NoModuleSupport)
		}
	case err == nil:
		if s.Unconfirmable != "" || s.Note != "" {
			t.Fatalf("/proc/modules present: %+v, want a confirmed list", s)
		}
	default:
		t.Fatal(err)
	}
}

// TestResidualProcessIsNamed starts a process in a real cgroup v2 group
// below a test "session" group after A and checks that B names it.
func TestResidualProcessIsNamed(t *testing.T) {
	requireRoot(t)
	session := newCgroup(t)
	run := filepath.Join(session, "run-1")
	must(t, os.Mkdir(run, 0o755))
	var cmd *exec.Cmd
	r := observe(t, &scope.Scope{Processes: true}, session, func(*Config) {
		fd, err := os.Open(run)
		must(t, err)
		defer fd.Close()
		cmd = exec.Command("/bin/sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
		must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	})
	c := named(t, r, scope.Processes, verdict.Added, "pid="+strconv.Itoa(cmd.Process.Pid)+" ")
	if !strings.Contains(c.After, `comm="sleep"`) || !strings.Contains(c.After, "cgroup=run-1") {
		t.Errorf("process change %+v, want sleep in run-1", c)
	}
}

// newCgroup makes a cgroup v2 group for the test and removes it (killing
// whatever is left) at the end.
func newCgroup(t *testing.T) string { return cgrouptest.New(t, "allox-effects-test") }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestScopePathChangeIsNamed changes a file in a tree outside the
// workspace that the scope lists.
func TestScopePathChangeIsNamed(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "app.conf")
	must(t, os.WriteFile(conf, []byte("a=1\n"), 0o644))
	r := observe(t, &scope.Scope{Paths: []string{dir}}, "", func(*Config) {
		must(t, os.WriteFile(conf, []byte("a=2\n"), 0o644))
		must(t, os.Chmod(dir, 0o700))
	})
	c := named(t, r, scope.Paths, verdict.Changed, conf)
	if c.Key != conf || c.Before == c.After {
		t.Errorf("change %+v, want %s keyed by its absolute path with a new hash", c, conf)
	}
	if d := named(t, r, scope.Paths, verdict.Changed, dir); !strings.Contains(d.After, "mode=0700") {
		t.Errorf("change %+v, want the directory's new mode", d)
	}
}
