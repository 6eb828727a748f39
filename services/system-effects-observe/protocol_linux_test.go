package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/services/internal/effects/capture"
	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/history"
	"github.com/allox-os/allox/services/internal/effects/scope"
	"github.com/allox-os/allox/services/internal/effects/verdict"
)

// fullScope is every domain but BPF: on a shared test host other processes
// load BPF objects at any time (TestRecorderLeavesNoBPFObjects covers BPF).
// fullScope leaves out what other test packages change on the shared host
// while these tests run (BPF objects, mounts, links, kernel.msgmax):
// TestEveryDomainIsConfirmable covers every domain without comparing them.
const fullScope = `{"sysctl":["kernel.msgmnb","kernel.hostname","vm."],"modules":true,"processes":true}`

// TestDirectRun is protocol 2 end to end: the agent writes a file in its
// workspace between A and B; the set is closed, the history holds the
// agent's exec, and the separate verifier binary finds the file as the
// run's effect and every other domain consistent. It runs twice: with the
// command line given at start, and as the daemon runs it, a standby
// observer handed its command line by a begin request.
func TestDirectRun(t *testing.T) {
	for _, mode := range []bool{false, true} {
		t.Run(map[bool]string{false: "flags", true: "standby"}[mode], func(t *testing.T) {
			standbyMode = mode
			defer func() { standbyMode = false }()
			testDirectRun(t)
		})
	}
}

func testDirectRun(t *testing.T) {
	s := start(t, evidence.ProtocolDirect, fullScope)
	s.ok(`{"op":"capture","point":"A"}`)
	s.agent("printf changed > effect.txt")
	s.ok(`{"op":"capture","point":"B"}`)
	s.ok(`{"op":"close"}`)
	if err := s.exit(); err != nil {
		t.Fatalf("observer: %v", err)
	}
	f, err := os.Open(filepath.Join(s.dir, evidence.HistoryFile))
	must(t, err)
	events, err := history.ReadAll(f)
	f.Close()
	must(t, err)
	execs := 0
	for _, e := range events {
		if e.Kind == history.KindExec {
			execs++
		}
	}
	if execs == 0 {
		t.Errorf("history holds %d events and no exec of the agent", len(events))
	}

	code, _ := s.verifier("system-effects-verify")
	var r verdict.Report
	readReport(t, filepath.Join(s.dir, evidence.ReportFile), &r)
	if code != 0 || r.Evidence != verdict.Complete || r.Verdict != verdict.Consistent {
		t.Fatalf("verifier exit %d, %s/%s %v; domains %+v", code, r.Evidence, r.Verdict, r.Problems, r.Run.Domains)
	}
	if len(r.Run.Effects) != 1 || r.Run.Effects[0].Key != "effect.txt" {
		t.Errorf("effects %+v, want effect.txt", r.Run.Effects)
	}
}

// TestEveryDomainIsConfirmable runs the observer with every domain in
// scope and checks that each is captured (never unconfirmable) at A and B
// into a complete set. Consistency is not asserted: other processes on a
// shared test host change BPF, mounts and links at any time.
func TestEveryDomainIsConfirmable(t *testing.T) {
	s := start(t, evidence.ProtocolDirect, `{"paths":["/etc"],"sysctl":"all","bpf":true,"mounts":true,"network":true,"modules":true,"processes":true}`)
	s.ok(`{"op":"capture","point":"A"}`)
	s.agent("printf x > effect.txt")
	s.ok(`{"op":"capture","point":"B"}`)
	s.ok(`{"op":"close"}`)
	if err := s.exit(); err != nil {
		t.Fatalf("observer: %v", err)
	}
	s.verifier("system-effects-verify")
	var r verdict.Report
	readReport(t, filepath.Join(s.dir, evidence.ReportFile), &r)
	if r.Evidence != verdict.Complete {
		t.Fatalf("evidence %s: %v", r.Evidence, r.Problems)
	}
	want := []string{"workspace", "shared", "paths", "sysctl", "bpf", "mounts", "network", "netfilter", "modules", "processes"}
	var got []string
	for _, d := range r.Run.Domains {
		got = append(got, d.Domain)
		if d.Verdict == verdict.Inconclusive {
			t.Errorf("%s: %s", d.Domain, d.Reason)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("domains %v, want %v", got, want)
	}
}

// TestRecorderLeavesNoBPFObjects: the history recorder runs between A and
// B, so its programs, maps and links must be in neither snapshot. The
// observer identifies them by id when it starts the recorder (they exist
// then) and B is only captured once every one of them is gone. (Comparing
// the BPF snapshots instead would be at the mercy of other processes on a
// shared test host that load BPF objects of their own at any time.)
func TestRecorderLeavesNoBPFObjects(t *testing.T) {
	s := start(t, evidence.ProtocolDirect, `{"bpf":true}`)
	s.ok(`{"op":"capture","point":"A"}`)
	kinds := map[string]int{}
	now, err := capture.BPFObjects()
	must(t, err)
	for id := range s.obs.recBPF {
		if !now[id] {
			t.Errorf("recorder object %s does not exist while recording", id)
		}
		kind, _, _ := strings.Cut(id, " ")
		kinds[kind]++
	}
	if kinds["prog"] == 0 || kinds["map"] == 0 || kinds["link"] == 0 {
		t.Fatalf("recorder objects %v: want its programs, maps and links identified", s.obs.recBPF)
	}
	loaded := s.obs.recBPF
	s.agent("true")
	s.ok(`{"op":"capture","point":"B"}`)
	now, err = capture.BPFObjects()
	must(t, err)
	for id := range loaded {
		if now[id] {
			t.Errorf("recorder object %s still loaded after B", id)
		}
	}
	s.ok(`{"op":"close"}`)
	if err := s.exit(); err != nil {
		t.Fatalf("observer: %v", err)
	}
}

// TestRecoveryWithSystemResidue is protocol 3: the agent writes a file and
// changes a sysctl; the recovery restores the workspace (the file is
// removed, standing in for the Btrfs rollback) but, like every Allox
// rollback, not the sysctl. The recovery verifier passes B→C, finds A→C
// inconsistent in the sysctl domain and requires the fence.
func TestRecoveryWithSystemResidue(t *testing.T) {
	const p = "/proc/sys/kernel/msgmnb"
	old, err := os.ReadFile(p)
	must(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(old)))
	must(t, err)
	t.Cleanup(func() { must(t, os.WriteFile(p, old, 0)) })

	s := start(t, evidence.ProtocolRecovery, fullScope, "-baseline", "baseline-1", "-scrub-runtime")
	s.ok(`{"op":"capture","point":"A"}`)
	s.agent("printf changed > effect.txt; echo " + strconv.Itoa(n+1) + " > " + p)
	s.ok(`{"op":"capture","point":"B"}`)
	must(t, os.Remove(filepath.Join(s.ws, "effect.txt")))
	s.ok(`{"op":"capture","point":"C"}`)
	s.ok(`{"op":"close"}`)
	if err := s.exit(); err != nil {
		t.Fatalf("observer: %v", err)
	}
	code, _ := s.verifier("system-effects-recovery-verify")
	var r verdict.RecoveryReport
	readReport(t, filepath.Join(s.dir, evidence.RecoveryReportFile), &r)
	if code != 1 || !r.Verified || r.Recovered || !r.Fence || r.Evidence != verdict.Complete {
		t.Fatalf("verifier exit %d: %+v; want exit 1, verified, not recovered, fenced", code, r)
	}
	for _, d := range r.Restored.Domains {
		want := verdict.Consistent
		if d.Domain == scope.Sysctl {
			want = verdict.Inconsistent
			if len(d.Changes) != 1 || d.Changes[0].Key != "kernel.msgmnb" {
				t.Errorf("A→C sysctl changes %+v, want kernel.msgmnb only", d.Changes)
			}
		}
		if d.Verdict != want {
			t.Errorf("A→C %s = %s (%s), want %s", d.Domain, d.Verdict, d.Reason, want)
		}
	}
}

// TestFaultLeavesTheSetUnclosed sends B before A: the observer logs the
// fault, answers an error and exits non-zero; the verifier then finds the
// set INCOMPLETE.
func TestFaultLeavesTheSetUnclosed(t *testing.T) {
	s := start(t, evidence.ProtocolDirect, `{}`)
	if r := s.send(`{"op":"capture","point":"B"}`); r.OK || !strings.Contains(r.Error, "out of order") {
		t.Fatalf("capture B first → %+v, want an out-of-order error", r)
	}
	if err := s.exit(); err == nil {
		t.Fatal("observer exited cleanly after a fault")
	}
	faults, err := os.ReadFile(filepath.Join(s.dir, evidence.FaultFile))
	must(t, err)
	if !strings.Contains(string(faults), "out of order") {
		t.Errorf("fault log %q does not name the fault", faults)
	}
	code, _ := s.verifier("system-effects-verify")
	var r verdict.Report
	readReport(t, filepath.Join(s.dir, evidence.ReportFile), &r)
	if code != 1 || r.Evidence != verdict.Incomplete || r.Verdict != verdict.Inconclusive || !contains(r.Problems, "set not closed") {
		t.Fatalf("verifier exit %d: %s/%s %v; want INCOMPLETE, INCONCLUSIVE, not closed", code, r.Evidence, r.Verdict, r.Problems)
	}
}

// TestStdinClosedIsAFault: a daemon that dies mid-run leaves a fault, not
// a closed set.
func TestStdinClosedIsAFault(t *testing.T) {
	s := start(t, evidence.ProtocolDirect, `{}`)
	s.ok(`{"op":"capture","point":"A"}`)
	s.in.Close()
	go func() { _, _ = s.out.ReadString('\n') }() // the fault's answer
	if err := s.exit(); err == nil || !strings.Contains(err.Error(), "stdin closed before close") {
		t.Fatalf("observer: %v, want the stdin fault", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, evidence.ManifestFile)); !os.IsNotExist(err) {
		t.Errorf("manifest written after a fault: %v", err)
	}
}

// TestResidueIsRecorded plays the managed path: the run's main process
// exits leaving a background sleep; the daemon freezes the group, asks for
// the residue, kills the group and captures B. The sleep is gone at B and
// named as residue all the same.
func TestResidueIsRecorded(t *testing.T) {
	s := start(t, evidence.ProtocolDirect, `{"processes":true}`)
	s.ok(`{"op":"capture","point":"A"}`)
	s.agent("/bin/sleep 60 >/dev/null 2>&1 &")
	run := filepath.Join(s.cgroup, "run-1")
	must(t, os.WriteFile(filepath.Join(run, "cgroup.freeze"), []byte("1"), 0))
	s.ok(`{"op":"residue"}`)
	must(t, os.WriteFile(filepath.Join(run, "cgroup.kill"), []byte("1"), 0))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(run, "cgroup.events"))
		must(t, err)
		if strings.Contains(string(b), "populated 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("run cgroup not empty 5 s after cgroup.kill")
		}
	}
	if r := s.send(`{"op":"residue"}`); r.OK {
		t.Error("a second residue was accepted")
	}
	if err := s.exit(); err == nil {
		t.Fatal("observer exited cleanly after a fault")
	}

	s = start(t, evidence.ProtocolDirect, `{"processes":true}`)
	s.ok(`{"op":"capture","point":"A"}`)
	s.agent("/bin/sleep 60 >/dev/null 2>&1 &")
	run = filepath.Join(s.cgroup, "run-1")
	must(t, os.WriteFile(filepath.Join(run, "cgroup.freeze"), []byte("1"), 0))
	s.ok(`{"op":"residue"}`)
	must(t, os.WriteFile(filepath.Join(run, "cgroup.kill"), []byte("1"), 0))
	s.ok(`{"op":"capture","point":"B"}`)
	s.ok(`{"op":"close"}`)
	if err := s.exit(); err != nil {
		t.Fatalf("observer: %v", err)
	}
	code, _ := s.verifier("system-effects-verify")
	var r verdict.Report
	readReport(t, filepath.Join(s.dir, evidence.ReportFile), &r)
	if code != 1 || r.Evidence != verdict.Complete || r.Verdict != verdict.Inconsistent {
		t.Fatalf("verifier exit %d, %s/%s, want 1, COMPLETE, INCONSISTENT", code, r.Evidence, r.Verdict)
	}
	for _, d := range r.Run.Domains {
		if d.Domain == scope.Processes {
			if len(d.Changes) != 1 || !strings.Contains(d.Changes[0].After, `comm="sleep"`) {
				t.Errorf("processes %+v, want the background sleep as residue", d)
			}
		}
	}
}

// TestStandbyRefusesABadBegin: a standby's first request must be a begin with a valid command
// line; anything else is answered with the error, and the observer exits without a set.
func TestStandbyRefusesABadBegin(t *testing.T) {
	requireReal(t)
	dir := filepath.Join(t.TempDir(), "run-1")
	for req, want := range map[string]string{
		`{"op":"capture","point":"A"}`:                                      `first request is "begin"`,
		`{"op":"begin","args":["-protocol","2"]}`:                           "-evidence: missing",
		`{"op":"begin","args":["-evidence","` + dir + `","-protocol","2"]}`: "-workspace: missing",
		`{"op":"begin","argv":[]}`:                                          `unknown field "argv"`,
	} {
		var out strings.Builder
		err := standby(context.Background(), strings.NewReader(req+"\n"), &out)
		var r response
		if jerr := json.Unmarshal([]byte(out.String()), &r); jerr != nil || err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(r.Error, want) {
			t.Errorf("%s: standby = %v, answered %q; want %q in both", req, err, out.String(), want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused begin created the evidence set: %v", err)
	}
}
