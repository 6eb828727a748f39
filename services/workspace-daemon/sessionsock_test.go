package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// runOut starts script in agent a's session, waits for it and returns it with its stdout and stderr.
func runOut(t *testing.T, url, session, script string) (r rpc.Run, stdout, stderr string) {
	t.Helper()
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"`+session+`","argv":["/bin/sh","-c",`+quote(script)+`]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	var out [2]rpc.Output
	for i, stream := range []string{"stdout", "stderr"} {
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`","stream":"`+stream+`"}}`), &out[i]))
	}
	return r, out[0].Data, out[1].Data
}

// sockets lists the daemon's session sockets on the guest.
func sockets(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(dir, e.Name()))
	}
	return out
}

// sessionInfo runs "allox session info" in the session and decodes what it printed.
func sessionInfo(t *testing.T, url, session string) rpc.SessionInfo {
	t.Helper()
	r, stdout, stderr := runOut(t, url, session, "/run/allox/bin/allox session info")
	if !exited0(r) {
		t.Fatalf("allox session info in %s: %+v, stderr %q", session, r, stderr)
	}
	var info rpc.SessionInfo
	if err := json.Unmarshal([]byte(stdout), &info); err != nil {
		t.Fatalf("allox session info printed %q: %v", stdout, err)
	}
	return info
}

func TestSessionSocket(t *testing.T) {
	root, dir, cg := btrfsRoot(t), socketsDir(t), testCgroupParent(t)
	bin := build(t)
	url, stop := stoppable(t, bin, root, "--session-sockets", dir, "--cgroup-parent", cg, "--turn-checkpoints")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	for _, s := range []string{"s1", "s2"} {
		mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"`+s+`"}}`)
	}

	t.Run("session.info is the caller's own", func(t *testing.T) {
		for _, s := range []string{"s1", "s2"} {
			info := sessionInfo(t, url, s)
			want := filepath.Join(root, "agents/a/workspace/sessions", s, "current")
			if info.AgentID != "a" || info.SessionID != s || info.Current != want || info.Socket != "/run/allox/session.sock" || !info.TurnCheckpoints {
				t.Errorf("session info in %s = %+v, want a/%s with current %s", s, info, s, want)
			}
			if !slices.Contains(info.Actions, rpc.ActionTurnEnd) || slices.Contains(info.Actions, rpc.ActionProcessStart) {
				t.Errorf("actions served on the socket: %q, want the session's only", info.Actions)
			}
		}
		got := sockets(t, dir)
		if len(got) != 2 {
			t.Errorf("sockets after runs of two sessions: %q, want two", got)
		}
		for _, p := range append(got, dir) {
			fi, err := os.Lstat(p)
			must(t, err)
			st := fi.Sys().(*syscall.Stat_t)
			want := [3]uint32{uint32(os.ModeSocket | 0o600), 2000, 2000}
			if p == dir {
				want = [3]uint32{uint32(os.ModeDir | 0o711), 0, 0}
			}
			if g := [3]uint32{uint32(fi.Mode()), st.Uid, st.Gid}; g != want {
				t.Errorf("%s: mode %s uid %d gid %d, want %s %d %d", p, fi.Mode(), st.Uid, st.Gid, os.FileMode(want[0]), want[1], want[2])
			}
		}
	})

	t.Run("turns through the client", func(t *testing.T) {
		r, _, stderr := runOut(t, url, "s1", "/run/allox/bin/allox turn begin 7 --label task=fix && /run/allox/bin/allox turn end 7 && /run/allox/bin/allox turn end 8 --failed")
		if !exited0(r) {
			t.Fatalf("turn begin/end: %+v, stderr %q", r, stderr)
		}
		var cp rpc.Checkpoint
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"checkpoint.get","params":{"agent_id":"a","session_id":"s1","checkpoint_id":"turn-7"}}`), &cp))
		if _, rerr := post(t, url, `{"action":"checkpoint.get","params":{"agent_id":"a","session_id":"s1","checkpoint_id":"turn-8"}}`); rerr == nil || rerr.Code != rpc.CodeNotFound {
			t.Errorf("a failed turn was checkpointed: %+v", rerr)
		}
		r, stdout, stderr := runOut(t, url, "s1", "/run/allox/bin/allox call turn.list")
		var hist struct{ Turns []rpc.Turn }
		if !exited0(r) || json.Unmarshal([]byte(stdout), &hist) != nil || len(hist.Turns) != 2 {
			t.Fatalf("turn.list on the session socket: %+v %q %q", r, stdout, stderr)
		}
		if t7, t8 := hist.Turns[0], hist.Turns[1]; t7.Outcome != "succeeded" || t7.Labels["task"] != "fix" || t7.Checkpoint != "turn-7" || t7.Begun == nil ||
			t8.Outcome != "failed" || t8.Begun != nil {
			t.Errorf("turn.list: %+v", hist.Turns)
		}
	})

	// Each attack runs in s1 and must fail naming why; nothing may happen to s2.
	for _, tt := range []struct {
		name, script string
		inStderr     []string
	}{
		{"another session", `/run/allox/bin/allox call turn.end '{"session_id":"s2","turn_id":"9","success":true}'`, []string{"forbidden", "field params.session_id", "a/s1"}},
		{"another agent", `/run/allox/bin/allox call session.info '{"agent_id":"b"}'`, []string{"forbidden", "field params.agent_id"}},
		{"a non-string id", `/run/allox/bin/allox call turn.begin '{"session_id":["s2"],"turn_id":"9"}'`, []string{"forbidden", "field params.session_id"}},
		{"a duplicate key", `/run/allox/bin/allox call turn.end '{"session_id":"s1","session_id":"s2","turn_id":"9","success":true}'`, []string{"field params.session_id"}},
		{"process.start", `/run/allox/bin/allox call process.start '{"argv":["/bin/true"]}'`, []string{"forbidden", "not served on the session listener"}},
		{"session.rollback", `/run/allox/bin/allox call session.rollback '{"checkpoint_id":"baseline"}'`, []string{"forbidden", "not served on the session listener"}},
		{"session.delete", `/run/allox/bin/allox call session.delete`, []string{"forbidden"}},
		{"system.info", `/run/allox/bin/allox call system.info`, []string{"forbidden"}},
		{"the other socket by its guest path", "for f in " + dir + "/*; do ALLOX_SESSION_SOCKET=$f /run/allox/bin/allox session info; done", []string{"no session socket at " + dir}},
	} {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			r, stdout, stderr := runOut(t, url, "s1", tt.script)
			if exited0(r) {
				t.Fatalf("%s: succeeded: %q", tt.script, stdout)
			}
			for _, want := range tt.inStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("%s: stderr %q, want %q", tt.script, stderr, want)
				}
			}
		})
	}
	var list struct{ Checkpoints []rpc.Checkpoint }
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"checkpoint.list","params":{"agent_id":"a","session_id":"s2"}}`), &list))
	if len(list.Checkpoints) != 1 {
		t.Errorf("s2 after s1's attacks: checkpoints %+v, want the baseline alone", list.Checkpoints)
	}

	t.Run("a run sees its own socket and nothing else", func(t *testing.T) {
		a := sockets(t, dir)
		r, stdout, stderr := runOut(t, url, "s2", `ls -A /run/allox /run/allox/bin; for f in `+strings.Join(a, " ")+` `+dir+`; do test -e $f && echo "visible: $f"; done; true`)
		want := "/run/allox:\nbin\nnetwork.py\nsession.sock\nshare.py\n\n/run/allox/bin:\nallox\n"
		if !exited0(r) || stdout != want {
			t.Errorf("in s2: %+v, stdout %q, stderr %q; want %q and no guest socket path visible", r, stdout, stderr, want)
		}
	})

	t.Run("the socket is not on the TCP listeners", func(t *testing.T) {
		_, rerr := post(t, url, `{"action":"session.info","params":{"agent_id":"a","session_id":"s1"}}`)
		if rerr == nil || rerr.Code != rpc.CodeForbidden || !strings.Contains(rerr.Message, "only on a session's own socket") {
			t.Errorf("session.info on loopback: %+v, want forbidden", rerr)
		}
	})

	t.Run("plugins not enabled", func(t *testing.T) {
		for _, tt := range []struct{ script, want string }{
			{"/run/allox/bin/allox share status", "allox: share: the session share plugin is not enabled in this appliance: the workspace daemon enables it with --share-tools\n"},
			{"python3 /run/allox/network.py connect example 22", "allox: network: the session network plugin is not enabled in this appliance: the workspace daemon enables it with --session-network isolated|proxy\n"},
			{"python3 /run/allox/share.py status", "allox: share: the session share plugin is not enabled in this appliance: the workspace daemon enables it with --share-tools\n"},
			{"/run/allox/bin/allox monitor status", "allox: monitor: the monitor plugin is not enabled in this appliance: the workspace daemon enables it with --monitor-root DIR\n"},
		} {
			r, _, stderr := runOut(t, url, "s1", tt.script)
			if r.ExitCode == nil || *r.ExitCode != 1 || stderr != tt.want {
				t.Errorf("%s: %+v (exit %d), stderr %q; want exit 1 and %q", tt.script, r, *r.ExitCode, stderr, tt.want)
			}
		}
	})

	t.Run("session.delete removes the socket", func(t *testing.T) {
		before := sockets(t, dir)
		mustPost(t, url, `{"action":"session.delete","params":{"agent_id":"a","session_id":"s2"}}`)
		after := sockets(t, dir)
		if len(before) != 2 || len(after) != 1 {
			t.Errorf("sockets before session.delete %q, after %q: want one fewer", before, after)
		}
	})

	// A restarted daemon (after a crash, too) clears what the last one left, and a run started
	// after it gets a working socket.
	stop()
	if got := sockets(t, dir); len(got) != 0 {
		t.Errorf("after a clean stop: sockets %q, want none", got)
	}
	cmd, _, addrs := start(t, bin, 1, "--root", root, "--listen", "127.0.0.1:0", "--session-sockets", dir, "--cgroup-parent", cg)
	url = "http://" + addrs["loopback"]
	if info := sessionInfo(t, url, "s1"); info.SessionID != "s1" {
		t.Errorf("after a restart: %+v", info)
	}
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	if got := sockets(t, dir); len(got) != 1 {
		t.Fatalf("after SIGKILL: sockets %q, want the stale one", got)
	}
	_, _, addrs = start(t, bin, 1, "--root", root, "--listen", "127.0.0.1:0", "--session-sockets", dir, "--cgroup-parent", cg)
	url = "http://" + addrs["loopback"]
	if got := sockets(t, dir); len(got) != 0 {
		t.Errorf("a started daemon kept stale sockets: %q", got)
	}
	if info := sessionInfo(t, url, "s1"); info.SessionID != "s1" {
		t.Errorf("after a crash and a restart: %+v", info)
	}
}

// TestSessionSocketsFlags checks the daemon refuses to start without its client or with a
// sockets directory bwrap cannot reach, naming the flag.
func TestSessionSocketsFlags(t *testing.T) {
	root := btrfsRoot(t)
	bin := build(t)
	private, err := os.MkdirTemp("", "ss") // 0700
	must(t, err)
	defer os.RemoveAll(private)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--client", "/nonexistent/allox"}, `--client /nonexistent/allox: stat /nonexistent/allox: no such file or directory: install the client`},
		{[]string{"--session-sockets", filepath.Join(private, "s")}, "chmod o+x " + private},
	} {
		args := append([]string{"--root", root, "--listen", "127.0.0.1:0"}, tt.args...)
		out, err := exec.Command(bin, withSessionSockets(t, args)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("%q: %v, output %s; want a refusal with %q", tt.args, err, out, tt.want)
		}
	}
}

// TestSessionSocketManaged: a managed run is root outside any sandbox, so nothing is bound for
// it; ALLOX_SESSION_SOCKET names its session's socket on the guest, and the client reaches it
// there as its own session.
func TestSessionSocketManaged(t *testing.T) {
	root, dir, cg := btrfsRoot(t), socketsDir(t), testCgroupParent(t)
	url := daemonOn(t, build(t), root, "--session-sockets", dir, "--cgroup-parent", cg, "--managed-execution")
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"m"}}`)
	var r rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"a","session_id":"m","managed":true,`+
		`"env":{"CLIENT":`+quote(client(t))+`},"argv":["/bin/sh","-c","echo $ALLOX_SESSION_SOCKET; test -e /run/allox/session.sock || \"$CLIENT\" session info"]}}`), &r))
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
	var out rpc.Output
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.output","params":{"run_id":"`+r.RunID+`"}}`), &out))
	sock, info, _ := strings.Cut(out.Data, "\n")
	var si rpc.SessionInfo
	if !exited0(r) || !strings.HasPrefix(sock, dir+"/") || json.Unmarshal([]byte(info), &si) != nil || si.SessionID != "m" {
		t.Errorf("managed run: %+v, stdout %q; want the guest path of its socket in %s and its session's info", r, out.Data, dir)
	}
}

// TestSessionFilesCannotBeReplaced attacks what the daemon binds into every run: a run may not
// overwrite, truncate, remove or rename over the client, the shims or its session socket (the next
// run, or another session's, would then run the attacker's client or reach a socket of its own),
// and the client on the guest is unchanged afterwards.
func TestSessionFilesCannotBeReplaced(t *testing.T) {
	root, dir, cg := btrfsRoot(t), socketsDir(t), testCgroupParent(t)
	url, _ := stoppable(t, build(t), root, "--session-sockets", dir, "--cgroup-parent", cg)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s1"}}`)
	before, err := os.ReadFile(client(t))
	must(t, err)
	for _, attack := range []string{
		`echo evil > /run/allox/bin/allox`,
		`: > /run/allox/share.py`,
		`rm -f /run/allox/network.py`,
		`rm -f /run/allox/session.sock`,
		`printf x > /tmp/x && mv -f /tmp/x /run/allox/session.sock`,
	} {
		r, _, _ := runOut(t, url, "s1", attack+` 2>/dev/null`)
		if exited0(r) {
			t.Errorf("%q succeeded in a run", attack)
		}
	}
	// /run/allox itself is the run's own (a directory of its sandbox's root): moving the client's
	// directory there changes only that run's view, never the next run's.
	if r, _, _ := runOut(t, url, "s1", `mv /run/allox/bin /run/allox/elsewhere && test ! -e /run/allox/bin/allox`); !exited0(r) {
		t.Errorf("a run could not rearrange its own /run/allox: %+v", r)
	}
	// The session's next run still has the daemon's client and a working socket.
	if info := sessionInfo(t, url, "s1"); info.SessionID != "s1" {
		t.Errorf("after the attacks, session info = %+v", info)
	}
	after, err := os.ReadFile(client(t))
	must(t, err)
	if !bytes.Equal(before, after) {
		t.Error("the client on the guest changed")
	}
}
