package netguard

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/go-cmp/cmp"
)

// TestGuardOutlivesAttacher attaches from a process that then exits without
// Close, as a daemon that crashes or restarts: its descriptors are gone, the
// guard is not.
func TestGuardOutlivesAttacher(t *testing.T) {
	cg := newCgroups(t)
	p := strconv.Itoa(int(listening(t)))
	allowed(t, cg.open, "attach", cg.guarded, p)
	t.Cleanup(func() { _ = Detach(cg.guarded) })
	refused(t, cg.run, "connect", "tcp", "127.0.0.1", p)
	refused(t, cg.run, "bind", "tcp", "::", p)
	if diff := cmp.Diff(counts(1), attached(t, cg.guarded, false)); diff != "" {
		t.Errorf("programs attached after the attacher exited (-want +got):\n%s", diff)
	}
}

// TestReattachReplaces is the restarted daemon: a second Attach replaces the
// first guard, port set included, and never stacks a second copy.
func TestReattachReplaces(t *testing.T) {
	cg := newCgroups(t)
	p, q := listening(t), listening(t)
	ps, qs := strconv.Itoa(int(p)), strconv.Itoa(int(q))
	t.Cleanup(func() { _ = Detach(cg.guarded) })
	first, err := Attach(cg.guarded, []uint16{p})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close() // its programs stay loaded while the second guard replaces them
	refused(t, cg.run, "connect", "tcp", "127.0.0.1", ps)

	second, err := Attach(cg.guarded, []uint16{q})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if got := second.Ports(); !cmp.Equal(got, []uint16{q}) {
		t.Errorf("Ports() = %v, want [%d]", got, q)
	}
	allowed(t, cg.run, "connect", "tcp", "127.0.0.1", ps)
	refused(t, cg.run, "connect", "tcp", "127.0.0.1", qs)
	if diff := cmp.Diff(counts(1), attached(t, cg.guarded, false)); diff != "" {
		t.Errorf("programs attached to the guarded group (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(counts(1), attached(t, cg.run, true)); diff != "" {
		t.Errorf("programs in force in the run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(guardIDs(t, second), attachedIDs(t, cg.guarded)); diff != "" {
		t.Errorf("attached programs are not the second guard's (-want +got):\n%s", diff)
	}
}

func TestDetachLiftsGuard(t *testing.T) {
	f := newFixture(t)
	refused(t, f.run, "connect", "tcp", "127.0.0.1", f.listened)
	if err := Detach(f.guarded); err != nil {
		t.Fatal(err)
	}
	allowed(t, f.run, "connect", "tcp", "127.0.0.1", f.listened)
	allowed(t, f.run, "bind", "tcp", "::", f.free)
	if diff := cmp.Diff(counts(0), attached(t, f.run, true)); diff != "" {
		t.Errorf("programs in force in the run after Detach (-want +got):\n%s", diff)
	}
	if err := Detach(f.guarded); err != nil {
		t.Errorf("second Detach: %v; want nil", err)
	}
}

func TestAttachErrors(t *testing.T) {
	cg := newCgroups(t)
	notCgroup := t.TempDir()
	for _, tt := range []struct {
		name  string
		dir   string
		ports []uint16
		want  string
		is    error
	}{
		{name: "not a cgroup", dir: notCgroup, ports: []uint16{8093}, want: "is not a cgroup v2 directory"},
		{name: "missing", dir: filepath.Join(cg.base, "missing"), ports: []uint16{8093}, is: fs.ErrNotExist},
		{name: "no ports", dir: cg.guarded, want: "no ports to protect"},
		{name: "port 0", dir: cg.guarded, ports: []uint16{0, 8093}, want: "port 0 cannot be protected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Attach(tt.dir, tt.ports)
			if err == nil {
				g.Close()
				_ = Detach(tt.dir)
				t.Fatalf("Attach(%s, %v) succeeded", tt.dir, tt.ports)
			}
			if tt.is != nil && !errors.Is(err, tt.is) || tt.want != "" && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Attach(%s, %v) = %v; want %q / %v", tt.dir, tt.ports, err, tt.want, tt.is)
			}
		})
	}
	if diff := cmp.Diff(counts(0), attached(t, cg.guarded, false)); diff != "" {
		t.Errorf("a failed Attach left programs (-want +got):\n%s", diff)
	}
	if err := Detach(notCgroup); err == nil || !strings.Contains(err.Error(), "is not a cgroup v2 directory") {
		t.Errorf("Detach(%s) = %v; want not a cgroup v2 directory", notCgroup, err)
	}
}

// guardIDs returns the IDs of g's programs, by program name.
func guardIDs(tb testing.TB, g *Guard) map[string]ebpf.ProgramID {
	tb.Helper()
	ids := make(map[string]ebpf.ProgramID)
	for _, h := range hooks {
		info, err := h.prog(&g.objs.netguardPrograms).Info()
		if err != nil {
			tb.Fatal(err)
		}
		id, _ := info.ID()
		ids[h.name] = id
	}
	return ids
}

// attachedIDs returns the IDs of the programs attached to dir, by the name
// of the guard's program for that hook.
func attachedIDs(tb testing.TB, dir string) map[string]ebpf.ProgramID {
	tb.Helper()
	f, err := os.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	ids := make(map[string]ebpf.ProgramID)
	for _, h := range hooks {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: h.attach})
		if err != nil {
			tb.Fatal(err)
		}
		for _, p := range res.Programs {
			ids[h.name] = p.ID
		}
	}
	return ids
}
