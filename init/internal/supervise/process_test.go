package supervise

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
)

func TestOutputToConsoleAndLog(t *testing.T) {
	var console syncBuffer
	dir := t.TempDir()
	long := strings.Repeat("x", maxLine+10)
	_, rec := start(t, Config{Console: &console, LogDir: dir},
		sh("talk", manifest.RestartNever, "echo hello; echo oops >&2; printf "+long+"; printf '\\nno newline'"))
	rec.await(t, "talk done 0", 1)
	want := "[talk] hello\n[talk] oops\n[talk] " + long[:maxLine] + "\n[talk] " + long[maxLine:] + "\n[talk] no newline\n"
	if diff := cmp.Diff(want, console.String()); diff != "" {
		t.Errorf("console (-want +got):\n%s", diff)
	}
	log, err := os.ReadFile(filepath.Join(dir, "talk.log"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello\noops\n" + long[:maxLine] + "\n" + long[maxLine:] + "\nno newline\n"; string(log) != want {
		t.Errorf("talk.log = %q", log)
	}
}

func TestEnvironmentIsClean(t *testing.T) {
	t.Setenv("INIT_ODDITY", "leaks")
	dir := t.TempDir()
	svc := manifest.Service{Name: "env", Restart: manifest.RestartNever, Command: []string{"env"},
		Env: map[string]string{"ZED": "last", "ALPHA": "first", "HOME": "/root"}}
	_, rec := start(t, Config{LogDir: dir}, svc)
	rec.await(t, "env done 0", 1)
	got, _ := os.ReadFile(filepath.Join(dir, "env.log"))
	want := "ALPHA=first\nHOME=/root\nPATH=" + DefaultPath + "\nZED=last\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
}

func TestLimits(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		adj        int
		nofile     uint64
		privileged bool
		trampoline string
	}{
		{"unprivileged", 500, 1000, false, ""},  // raising oom_score_adj, a limit under the hard one
		{"kata-agent", -997, 1048576, true, ""}, // the agent's oom_score_adj; its limit is capped by the host's fs.nr_open
		{"unprivileged through the trampoline", 500, 1000, false, exe},
		{"kata-agent through the trampoline", -997, 1048576, true, exe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.privileged && !hasCapSysResource(t) {
				t.Skip("needs CAP_SYS_RESOURCE to lower oom_score_adj and raise the hard RLIMIT_NOFILE; " +
					"run as real root (sudo go test ./init/internal/supervise -run Limits), not in a capability-reduced container")
			}
			svc := sh("limited", manifest.RestartNever, "exec sleep 100")
			svc.OOMScoreAdj, svc.NoFile = tc.adj, tc.nofile
			s, rec := start(t, Config{Trampoline: tc.trampoline}, svc)
			rec.await(t, "limited ready", 1)
			defer s.Stop()
			pid := startedPID(rec)
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(comm) == "sleep\n" {
					break // the trampoline, if any, has exec'd the service
				}
			}
			adj, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
			if strings.TrimSpace(string(adj)) != strconv.Itoa(tc.adj) {
				t.Errorf("oom_score_adj = %q, want %d", adj, tc.adj)
			}
			limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
			want := fmt.Sprintf("Max open files            %-21d%-21d", tc.nofile, tc.nofile)
			if !strings.Contains(string(limits), want) {
				t.Errorf("limits have no %q:\n%s", want, limits)
			}
			rec.mu.Lock()
			for _, e := range rec.events {
				if e.Kind == Warning {
					t.Errorf("warning: %v", e.Err)
				}
			}
			rec.mu.Unlock()
		})
	}
}

// TestLimitsFromTheFirstInstruction: through the trampoline a service reads its limits in its very
// first command, where applying them from outside after the exec would race it.
func TestLimitsFromTheFirstInstruction(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	svc := sh("first", manifest.RestartNever, "cat /proc/self/oom_score_adj; ulimit -n; ulimit -Hn; echo $0 \"$@\"")
	svc.Command = append(svc.Command, "argv0", "a b")
	svc.OOMScoreAdj, svc.NoFile = 500, 1000
	_, rec := start(t, Config{LogDir: dir, Trampoline: exe}, svc)
	rec.await(t, "first done 0", 1)
	got, _ := os.ReadFile(filepath.Join(dir, "first.log"))
	if want := "500\n1000\n1000\nargv0 a b\n"; string(got) != want {
		t.Errorf("the service's first output %q, want %q: limits and argv as the service sees them at once", got, want)
	}
	bad := manifest.Service{Name: "bad", Restart: manifest.RestartNever, Command: []string{"/bin/sh", "-c", "exit 0"}, NoFile: 1 << 62}
	_, rec = start(t, Config{LogDir: dir, Trampoline: exe}, bad)
	rec.await(t, "bad done 127", 1) // the trampoline refuses to start it with less than asked
	if log, _ := os.ReadFile(filepath.Join(dir, "bad.log")); !strings.Contains(string(log), "allox-exec: RLIMIT_NOFILE") {
		t.Errorf("bad.log %q; want the trampoline's reason", log)
	}
}

func startedPID(rec *recorder) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.events {
		if e.Kind == Started {
			return e.PID
		}
	}
	return 0
}

func hasCapSysResource(t *testing.T) bool {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(l, "CapEff:\t"); ok {
			caps, err := strconv.ParseUint(hex, 16, 64)
			return err == nil && caps&(1<<24) != 0 // CAP_SYS_RESOURCE
		}
	}
	return false
}

// TestZombiesAreReaped: a service leaves a background child behind, which is re-parented to
// this process (a subreaper, as PID 1 is for everyone) and must be reaped as an orphan.
func TestZombiesAreReaped(t *testing.T) {
	before := reaper.Orphans()
	_, rec := start(t, Config{}, sh("parent", manifest.RestartNever, "sleep 0.2 & exit 0"))
	rec.await(t, "parent done 0", 1)
	deadline := time.Now().Add(10 * time.Second)
	for reaper.Orphans() == before {
		if time.Now().After(deadline) {
			t.Fatal("the orphaned sleep was never reaped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if z := zombies(t); len(z) > 0 {
		t.Errorf("zombie children left: %v", z)
	}
}

// zombies lists the children of this process in state Z.
func zombies(t *testing.T) []int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut after the last ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[0] == "Z" && fields[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, pid)
		}
	}
	return out
}

func TestAgent(t *testing.T) {
	root := t.TempDir()
	daemon := manifest.Service{Name: "daemon", Command: []string{"/usr/bin/daemon"}, Restart: "always"}
	m := &manifest.Manifest{Services: []manifest.Service{daemon}}
	if _, ok, err := Agent(root, m); ok || err != nil {
		t.Fatalf("no agent binary, no kata_agent: ok=%v err=%v", ok, err)
	}
	// The manifest's kata_agent: Kata's unit, with its restart budget.
	m.KataAgent = &manifest.KataAgent{Path: AgentPath, MaxRestarts: 2}
	got, ok, err := Agent(root, m)
	if !ok || err != nil {
		t.Fatalf("kata_agent: ok=%v err=%v", ok, err)
	}
	want := manifest.Service{Name: "kata-agent", Command: []string{AgentPath}, Restart: manifest.RestartOnFailure,
		MaxRestarts: 2, OOMScoreAdj: -997, NoFile: 1073741824, Critical: true, MemoryLow: 32 << 20}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent service (-want +got):\n%s", diff)
	}
	m.KataAgent.MaxRestarts = 0 // Kata's own behaviour: the first failure powers off
	if got, _, _ := Agent(root, m); got.Restart != manifest.RestartNever || got.MaxRestarts != 0 {
		t.Errorf("max_restarts 0: restart %q, max_restarts %d; want never, 0", got.Restart, got.MaxRestarts)
	}
	// No kata_agent, but a binary at AgentPath: supervised with the default budget.
	m.KataAgent = nil
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, AgentPath), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := Agent(root, m); !ok || err != nil || got.MaxRestarts != DefaultAgentRestarts {
		t.Errorf("agent found in the root: ok=%v err=%v max_restarts=%d", ok, err, got.MaxRestarts)
	}
	own := manifest.Service{Name: "agent", Command: []string{AgentPath, "--debug"}, Restart: "never"}
	if _, ok, err := Agent(root, &manifest.Manifest{Services: []manifest.Service{own}}); ok || err != nil {
		t.Errorf("a manifest service runs the agent itself: ok=%v err=%v; want no second agent", ok, err)
	}
	if _, _, err := Agent(root, &manifest.Manifest{Services: []manifest.Service{own}, KataAgent: &manifest.KataAgent{Path: AgentPath}}); err == nil {
		t.Error("no error for a service that runs the agent beside kata_agent")
	}
	clash := manifest.Service{Name: "kata-agent", Command: []string{"/bin/true"}, Restart: "never"}
	if _, _, err := Agent(root, &manifest.Manifest{Services: []manifest.Service{clash}}); err == nil {
		t.Error("no error for a service named kata-agent that does not run the agent")
	}
}

func TestLookPath(t *testing.T) {
	if p, err := lookPath("sh", []string{"PATH=/nonexistent:/bin"}); err != nil || p != "/bin/sh" {
		t.Errorf("lookPath(sh) = %q, %v", p, err)
	}
	if _, err := lookPath("sh", []string{"PATH=/nonexistent"}); err == nil {
		t.Error("found sh outside PATH")
	}
}

func TestLogRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.log")
	l, err := openLog(path)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 1023) + "\n")
	for range maxLog/len(line) + 10 {
		if _, err := l.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	old, _ := os.Stat(path + ".1")
	cur, _ := os.Stat(path)
	if old == nil || cur == nil || old.Size() != maxLog || cur.Size() != 10*int64(len(line)) {
		t.Errorf("after rotation: %v and %v, want %d and %d bytes", old, cur, maxLog, 10*len(line))
	}
}

// TestOOMScoreAdjInheritedWithoutTrampoline: a service with an oom_score_adj and no open-file limit
// is forked with it (init's own value meanwhile), so its first command reads it; the trampoline,
// configured here as a path that does not exist, is not involved.
func TestOOMScoreAdjInheritedWithoutTrampoline(t *testing.T) {
	dir := t.TempDir()
	before, err := os.ReadFile(selfOOMScoreAdj)
	if err != nil {
		t.Fatal(err)
	}
	svc := sh("adj", manifest.RestartNever, "cat /proc/self/oom_score_adj")
	svc.OOMScoreAdj = 500
	_, rec := start(t, Config{LogDir: dir, Trampoline: "/nonexistent/allox-exec"}, svc)
	rec.await(t, "adj done 0", 1)
	if got, _ := os.ReadFile(filepath.Join(dir, "adj.log")); string(got) != "500\n" {
		t.Errorf("the service's first output %q, want 500", got)
	}
	if after, _ := os.ReadFile(selfOOMScoreAdj); string(after) != string(before) {
		t.Errorf("the supervisor's own oom_score_adj is %q after the start, was %q", after, before)
	}
}

// TestOOMScoreAdjNotInheritedByOtherChildren attacks the window in which init's own oom_score_adj
// is a service's: children forked meanwhile through the reaper (a boot step's tool, another
// service) must never get it.
func TestOOMScoreAdjNotInheritedByOtherChildren(t *testing.T) {
	before, err := os.ReadFile(selfOOMScoreAdj)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(before))
	svc := sh("adj", manifest.RestartAlways, "exit 0") // restarted again and again: many forks at 500
	svc.OOMScoreAdj = 500
	s, _ := start(t, Config{Backoff: Backoff{Min: time.Millisecond, Max: time.Millisecond, Reset: time.Hour}}, svc)
	defer s.Stop()
	for i := range 200 {
		out, err := reaper.CombinedOutput(context.Background(), exec.Command("/bin/cat", "/proc/self/oom_score_adj"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != want {
			t.Fatalf("fork %d beside the service's starts got oom_score_adj %s, want init's own %s", i, got, want)
		}
	}
}
