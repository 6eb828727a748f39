package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/tracker"
)

func TestProcessTrackerEBPF(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, buildProcessTree(t), root, "--process-tracker", "--process-tree-provider", "ebpf")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)

	// A run of another session, alive while this session's run forks and execs.
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"other"}}`)
	var otherRun rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"other","argv":["/bin/sh","-c","sleep 0.5; exit 5"]}}`), &otherRun))

	// A process started outside the daemon, alive while the run forks and execs.
	outside := exec.Command("/bin/sh", "-c", "sleep 0.5; exit 9")
	must(t, outside.Start())
	defer outside.Wait()

	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["/bin/sh","-c","(sleep 1 &) ; sh -c \"exit 7\"; exit 3"]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	if r.ExitCode == nil || *r.ExitCode != 3 {
		t.Fatalf("run ended %+v, want exit code 3", r)
	}
	if want := fmt.Sprintf(`{"root_pid":%d}`, r.Pid); string(r.Plugins["process-tree"]) != want {
		t.Errorf("plugins.process-tree = %s, want %s: the run's first process, registered by the plugin's hook", r.Plugins["process-tree"], want)
	}

	// When process.wait returns, the run's cgroup has been killed and emptied, so every process of
	// the run has exited; the records trail by the ring buffer's poll interval: wait for every exit.
	var evs []tracker.Event
	deadline := time.Now().Add(10 * time.Second)
	for {
		var page tracker.Page
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.events","params":{"agent_id":"a","session_id":"s","run_id":"`+r.RunID+`","limit":10000}}`), &page))
		evs = page.Events
		if allExited(evs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every process of the run has its exit recorded; events:\n%s", dumpEvents(evs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("events:\n%s", dumpEvents(evs))
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
		if e.PID == outside.Process.Pid {
			t.Errorf("a process started outside the daemon was recorded: %+v", e)
		}
		if e.RunID != r.RunID {
			t.Errorf("event of another run: %+v", e)
		}
	}
	if kinds["fork"] == 0 || kinds["exec"] == 0 || kinds["exit"] == 0 {
		t.Errorf("events by kind %v, want fork, exec and exit", kinds)
	}

	// The session's history (no run_id) holds only its own run: the other session's never appears
	// there, and is recorded under its own session.
	mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+otherRun.RunID+`"}}`)
	var sessionPage tracker.Page
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.events","params":{"agent_id":"a","session_id":"s","limit":10000}}`), &sessionPage))
	for _, e := range sessionPage.Events {
		if e.RunID != r.RunID {
			t.Errorf("session s lists an event of run %s: %+v", e.RunID, e)
		}
	}
	var otherPage tracker.Page
	deadline = time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(otherPage.Events, func(e tracker.Event) bool { return e.ExitCode != nil && *e.ExitCode == 5 }) {
		if time.Now().After(deadline) {
			t.Fatalf("the other session's exit 5 was never recorded under it:\n%s", dumpEvents(otherPage.Events))
		}
		time.Sleep(20 * time.Millisecond)
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.events","params":{"agent_id":"a","session_id":"other","limit":10000}}`), &otherPage))
	}

	// Paging: two events from offset 1 are events 1 and 2.
	var page tracker.Page
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.events","params":{"agent_id":"a","session_id":"s","offset":1,"limit":2}}`), &page))
	if page.Next != 3 || len(page.Events) != 2 || page.Events[0].PID != evs[1].PID || page.Events[0].Kind != evs[1].Kind {
		t.Errorf("page from 1 = %+v, want events 1 and 2 of %d", page, len(evs))
	}

	var tree tracker.Tree
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.tree","params":{"agent_id":"a","session_id":"s","run_id":"`+r.RunID+`"}}`), &tree))
	if tree.Source != "ebpf" || !tree.Complete || tree.Drops == nil || *tree.Drops != 0 {
		t.Errorf("tree source %q complete %v drops %v, want ebpf, complete, 0 drops", tree.Source, tree.Complete, tree.Drops)
	}
	byPid := map[int]tracker.Process{}
	for _, p := range tree.Processes {
		byPid[p.PID] = p
		if p.State != "exited" || p.ExitCode == nil {
			t.Errorf("process %+v still running after the run ended", p)
		}
	}
	// The run's command: /bin/sh exiting 3, its child sh exiting 7, and the background child that a
	// subshell of the command forked (the daemonized grandchild). That grandchild is "sleep" once it
	// has exec'd; if the run ended first, the run's cgroup was killed and it is still "sh": either
	// way it is attributed to the run.
	var top, seven *tracker.Process
	for _, p := range tree.Processes {
		switch {
		case p.ExitCode != nil && *p.ExitCode == 3 && p.Exe == "/bin/sh":
			top = &p
		case p.ExitCode != nil && *p.ExitCode == 7:
			seven = &p
		}
	}
	if top == nil || seven == nil {
		t.Fatalf("tree lacks the command (exit 3) or its sh (exit 7):\n%s", dumpTree(tree))
	}
	if seven.PPID != top.PID {
		t.Errorf("sh exiting 7 has parent %d, want the command %d", seven.PPID, top.PID)
	}
	grandchild := slices.ContainsFunc(tree.Processes, func(p tracker.Process) bool {
		parent, ok := byPid[p.PPID]
		return ok && parent.PPID == top.PID && parent.PID != seven.PID && (p.Comm == "sleep" || p.Comm == "sh")
	})
	if !grandchild {
		t.Errorf("no background grandchild of the command (via its subshell) in the tree:\n%s", dumpTree(tree))
	}
	// argv is read from /proc when the exec event arrives, best effort: this command is gone by then.
	if len(top.Argv) > 0 && !slices.Equal(top.Argv, []string{"/bin/sh", "-c", `(sleep 1 &) ; sh -c "exit 7"; exit 3`}) {
		t.Errorf("command argv = %q", top.Argv)
	}
	if !slices.ContainsFunc(tree.Processes, func(p tracker.Process) bool { return p.Root }) {
		t.Errorf("the run's root (bwrap) is not in the tree:\n%s", dumpTree(tree))
	}
}

func TestProcessTrackerCgroup(t *testing.T) {
	root := btrfsRoot(t)
	url := daemonOn(t, build(t), root, "--process-tracker")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"s","argv":["sleep","30"]}}`), &r))
	defer mustPost(t, url, `{"action":"process.kill","params":{"run_id":"`+r.RunID+`"}}`)

	var tree tracker.Tree
	deadline := time.Now().Add(10 * time.Second)
	for {
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.tree","params":{"agent_id":"a","session_id":"s"}}`), &tree))
		if slices.ContainsFunc(tree.Processes, func(p tracker.Process) bool { return slices.Equal(p.Argv, []string{"sleep", "30"}) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep 30 never listed:\n%s", dumpTree(tree))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tree.Source != "cgroup" || tree.Complete || !strings.Contains(tree.Note, "--process-tree-provider=ebpf") {
		t.Errorf("tree source %q complete %v note %q, want cgroup, incomplete, a note naming the flag", tree.Source, tree.Complete, tree.Note)
	}
	for _, p := range tree.Processes {
		if !strings.HasPrefix(p.Cgroup, r.Cgroup) || p.State != "running" || p.StartTime == 0 || p.PPID == 0 {
			t.Errorf("process %+v: want running, in the run cgroup %s, with parent and start time", p, r.Cgroup)
		}
		if slices.Equal(p.Argv, []string{"sleep", "30"}) && !strings.HasSuffix(p.Exe, "/sleep") {
			t.Errorf("sleep's exe = %q", p.Exe)
		}
		// The sandbox launcher's command line is the run's own argv behind its options' fd, never
		// bwrap's options with their host paths (issue 11: process.tree leaked them).
		if strings.HasSuffix(p.Exe, "/bwrap") && !slices.Equal(p.Argv[1:], []string{"--args", "4", "--", "sleep", "30"}) {
			t.Errorf("launcher process %d shows argv %q, want bwrap --args 4 -- and the run's own", p.PID, p.Argv)
		}
		if strings.Contains(strings.Join(p.Argv, " "), root) || p.RunID != r.RunID {
			t.Errorf("process %d: argv %q names a host path, or run id %q is not %s", p.PID, p.Argv, p.RunID, r.RunID)
		}
	}
	if n := len(tree.Processes); n < 2 {
		t.Errorf("tree has %d processes, want the launcher's and sleep's:\n%s", n, dumpTree(tree))
	}
	_, rerr := post(t, url, `{"action":"process.events","params":{"agent_id":"a","session_id":"s"}}`)
	if rerr == nil || rerr.Code != rpc.CodeUnsupported || !strings.Contains(rerr.Message, "--process-tree-provider") {
		t.Errorf("process.events without the provider: %+v, want unsupported naming --process-tree-provider", rerr)
	}
}

// TestProcessTreeNotInstalled checks that a daemon built without the process-tree plugin refuses
// --process-tree-provider=ebpf, naming the flag and the spec change that installs the provider.
func TestProcessTreeNotInstalled(t *testing.T) {
	var stderr strings.Builder
	cmd := exec.Command(build(t), "--root", t.TempDir(), "--listen", "127.0.0.1:0",
		"--process-tracker", "--process-tree-provider", "ebpf")
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("daemon without the plugin: %v, want a non-zero exit\n%s", err, stderr.String())
	}
	for _, want := range []string{"--process-tree-provider=ebpf", "the process-tree plugin is not installed in this image",
		`add plugins = ["process-tree"] to the daemon's service block in the image spec`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}

func TestProcessTrackerDisabled(t *testing.T) {
	url := daemonOn(t, build(t), btrfsRoot(t))
	for _, action := range []string{"process.tree", "process.events"} {
		_, rerr := post(t, url, `{"action":"`+action+`","params":{"agent_id":"a","session_id":"s"}}`)
		if rerr == nil || rerr.Code != rpc.CodeUnsupported || !strings.Contains(rerr.Message, "--process-tracker") {
			t.Errorf("%s without --process-tracker: %+v, want unsupported naming --process-tracker", action, rerr)
		}
	}
}

// allExited reports whether every process seen in evs, the run's root among them, has exited.
func allExited(evs []tracker.Event) bool {
	type key struct {
		pid   int
		start uint64
	}
	live := map[key]bool{}
	root := false
	for _, e := range evs {
		live[key{e.PID, e.StartTime}] = e.Kind != "exit"
		root = root || e.Root
	}
	for _, l := range live {
		if l {
			return false
		}
	}
	return root && len(evs) > 0
}

func dumpEvents(evs []tracker.Event) string {
	var b strings.Builder
	for _, e := range evs {
		code := ""
		if e.ExitCode != nil {
			code = fmt.Sprint(*e.ExitCode)
		}
		fmt.Fprintf(&b, "%s pid=%d ppid=%d comm=%s file=%s argv=%q code=%s root=%v\n", e.Kind, e.PID, e.PPID, e.Comm, e.Filename, e.Argv, code, e.Root)
	}
	return b.String()
}

func dumpTree(tr tracker.Tree) string {
	var b strings.Builder
	for _, p := range tr.Processes {
		code := ""
		if p.ExitCode != nil {
			code = fmt.Sprint(*p.ExitCode)
		}
		fmt.Fprintf(&b, "pid=%d ppid=%d comm=%s exe=%s argv=%q state=%s code=%s root=%v\n", p.PID, p.PPID, p.Comm, p.Exe, p.Argv, p.State, code, p.Root)
	}
	return b.String()
}
