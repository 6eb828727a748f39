package tracker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 4242 1000 10"
	for _, tc := range []struct {
		name, in string
		want     stat
		err      bool
	}{
		{"plain", "123 (sh) S 7" + tail, stat{comm: "sh", ppid: 7, startTime: 4242 * 1e7}, false},
		{"comm with spaces and parens", "9 (a) b (c)) R 1" + tail, stat{comm: "a) b (c)", ppid: 1, startTime: 4242 * 1e7}, false},
		{"no comm", "9 sh R 1" + tail, stat{}, true},
		{"short", "9 (sh) R 1 2 3", stat{}, true},
		{"bad ppid", "9 (sh) R x" + tail, stat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat(strings.NewReader(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("parseStat(%q) error = %v, want error %v", tc.in, err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(stat{})); diff != "" {
				t.Errorf("parseStat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseCmdline(t *testing.T) {
	for in, want := range map[string][]string{
		"":                       {},
		"sh\x00-c\x00exit 3\x00": {"sh", "-c", "exit 3"},
		"a\x00\x00b\x00":         {"a", "", "b"},
		"no-terminator":          {"no-terminator"},
	} {
		if diff := cmp.Diff(want, parseCmdline([]byte(in))); diff != "" {
			t.Errorf("parseCmdline(%q) (-want +got):\n%s", in, diff)
		}
	}
}

// TestReadProcessFixture reads a process from a procfs-shaped directory.
func TestReadProcessFixture(t *testing.T) {
	proc := t.TempDir()
	dir := filepath.Join(proc, "42")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte("42 (sleep) S 41 0 0 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "cmdline"), []byte("sleep\x0030\x00"), 0o644))
	must(t, os.Symlink("/usr/bin/sleep", filepath.Join(dir, "exe")))
	got, err := readProcess(proc, 42)
	must(t, err)
	want := Process{PID: 42, PPID: 41, StartTime: 500 * 1e7, Comm: "sleep", Exe: "/usr/bin/sleep", Argv: []string{"sleep", "30"}, State: StateRunning}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readProcess (-want +got):\n%s", diff)
	}
	cg := filepath.Join(t.TempDir(), "session")
	must(t, os.MkdirAll(filepath.Join(cg, "run"), 0o755))
	must(t, os.WriteFile(filepath.Join(cg, "cgroup.procs"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(cg, "run", "cgroup.procs"), []byte("42\n43\n"), 0o644)) // 43 exited meanwhile
	procs, err := cgroupProcs(proc, cg)
	must(t, err)
	want.Cgroup = filepath.Join(cg, "run")
	if diff := cmp.Diff([]Process{want}, procs); diff != "" {
		t.Errorf("cgroupProcs (-want +got):\n%s", diff)
	}
	if procs, err := cgroupProcs(proc, filepath.Join(cg, "gone")); err != nil || len(procs) != 0 {
		t.Errorf("cgroupProcs of a missing group = %v, %v; want empty", procs, err)
	}
}

// TestReadProcessReal reads this test process from the real /proc.
func TestReadProcessReal(t *testing.T) {
	p, err := readProcess("/proc", os.Getpid())
	must(t, err)
	exe, _ := os.Executable()
	if p.PPID != os.Getppid() || p.Exe != exe || len(p.Argv) == 0 || p.Argv[0] != os.Args[0] || p.StartTime == 0 {
		t.Errorf("readProcess(self) = %+v; want ppid %d, exe %s, argv[0] %s", p, os.Getppid(), exe, os.Args[0])
	}
	b, _ := os.ReadFile("/proc/self/stat")
	if !strings.HasPrefix(string(b), strconv.Itoa(os.Getpid())+" ") {
		t.Fatalf("/proc/self/stat = %q", b)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
