package tracked

import (
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStartTrue measures Start-to-exit of /bin/true in the sandbox and, in the same run and
// interleaved, the same run in the previous sandbox (root bwrap, no user namespace, seccomp
// filter or /proc masks, its options on its command line) and a bare fork/exec of the same argv.
// It reports the three p50s, what the boundary adds over the previous sandbox, and the whole
// sandbox's overhead over fork/exec.
func BenchmarkStartTrue(b *testing.B) {
	e := newEnv(b, nil)
	var bare, previous, boundary []time.Duration
	startTrue := func(into *[]time.Duration) {
		t0 := time.Now()
		st := e.run(b, e.req("s1", "/bin/true"))
		*into = append(*into, time.Since(t0))
		if st.State != StateExited || st.ExitCode != 0 {
			b.Fatalf("status %+v", st)
		}
	}
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, time.Since(t0))
		e.m.sandboxCmd = e.m.boundaryCmd
		startTrue(&boundary)
		e.m.sandboxCmd = e.m.previousCmd
		startTrue(&previous)
	}
	b.StopTimer()
	pb, pp, pn := p50(bare), p50(previous), p50(boundary)
	b.ReportMetric(float64(pb.Microseconds()), "bare-p50-µs")
	b.ReportMetric(float64(pp.Microseconds()), "previous-p50-µs")
	b.ReportMetric(float64(pn.Microseconds()), "sandbox-p50-µs")
	b.ReportMetric(float64((pn - pp).Microseconds()), "boundary-added-p50-µs")
	b.ReportMetric(float64((pn - pb).Microseconds()), "overhead-p50-µs")
	b.ReportMetric(float64(pn)/float64(max(pb, 1)), "ratio")
	b.ReportMetric(float64(len(boundary)), "samples")
}

// previousCmd is the sandbox before issue 11, the bench's baseline: bwrap as root, no user
// namespace, no seccomp filter, no /proc masks, every option on its command line.
func (m *Manager) previousCmd(req *StartRequest, cwd, tmp string) (*launch, error) {
	a := []string{"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev",
		"--block-fd", strconv.Itoa(blockFD)}
	for _, d := range m.cfg.SystemDirs {
		if target, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", target, d)
			continue
		}
		a = append(a, "--ro-bind", d, d)
	}
	ws := req.Workspace
	a = append(a, "--bind", tmp, "/tmp", "--ro-bind", ws.Shared, ws.Shared, "--bind", ws.Current, ws.Current, "--chdir", cwd, "--clearenv")
	for _, kv := range sandboxEnv(req) {
		a = append(a, "--setenv", kv[0], kv[1])
	}
	cmd := exec.Command(m.cfg.Bwrap, append(append(a, "--"), req.Argv...)...)
	cmd.Env, cmd.Dir, cmd.SysProcAttr = []string{"PATH=" + sandboxPath}, "/", &syscall.SysProcAttr{}
	return &launch{cmd: cmd}, nil
}

func p50(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

type nopHook struct{}

func (nopHook) Begin(*Status) (json.RawMessage, error)      { return nil, nil }
func (nopHook) End(*Status, error) (json.RawMessage, error) { return nil, nil }
func (nopHook) Residue(*Status) error                       { return nil }

// BenchmarkHooks measures Start-to-exit of /bin/true with three no-op hooks, and with three no-op
// hooks one of which asks for the group frozen (Hook.Frozen: frozen and thawed around Begin,
// frozen again, empty, for End), beside the same run without hooks, interleaved in the same run.
func BenchmarkHooks(b *testing.B) {
	e := newEnv(b, nil)
	hooks := []Hook{{Name: "a", Observer: nopHook{}}, {Name: "b", Observer: nopHook{}}, {Name: "c", Observer: nopHook{}}}
	frozenHooks := append([]Hook{{Name: "f", Observer: nopHook{}, Frozen: true}}, hooks[1:]...)
	var without, with, withFrozen []time.Duration
	startTrue := func(h []Hook, into *[]time.Duration) {
		req := e.req("s1", "/bin/true")
		req.Hooks = h
		t0 := time.Now()
		st := e.run(b, req)
		*into = append(*into, time.Since(t0))
		if st.State != StateExited || st.ExitCode != 0 {
			b.Fatalf("status %+v", st)
		}
	}
	for b.Loop() {
		startTrue(nil, &without)
		startTrue(hooks, &with)
		startTrue(frozenHooks, &withFrozen)
	}
	b.ReportMetric(float64(p50(without).Microseconds()), "no-hooks-p50-µs")
	b.ReportMetric(float64(p50(with).Microseconds()), "three-hooks-p50-µs")
	b.ReportMetric(float64(p50(withFrozen).Microseconds()), "three-hooks-frozen-p50-µs")
	b.ReportMetric(float64((p50(with) - p50(without)).Microseconds()), "hooks-added-p50-µs")
	b.ReportMetric(float64((p50(withFrozen) - p50(without)).Microseconds()), "frozen-hooks-added-p50-µs")
	b.ReportMetric(float64(len(with)), "samples")
}
