package main

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/allox-os/allox/internal/testenv"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// execDaemon is a daemon on a real store with agent a and session s.
func execDaemon(t *testing.T) (*rpc.Client, string) {
	t.Helper()
	url := daemonOn(t, build(t), btrfsRoot(t))
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"a"}}`)
	mustPost(t, url, `{"action":"session.create","params":{"agent_id":"a","session_id":"s"}}`)
	return rpc.NewClient(url, "", nil), url
}

func waitExec(t *testing.T, x *rpc.Exec) rpc.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := x.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return r
}

// An interactive shell on a terminal through process.exec: commands, a resize, the exit status.
func TestExecTerminalShell(t *testing.T) {
	c, _ := execDaemon(t)
	x, err := c.Exec(context.Background(), map[string]any{"agent_id": "a", "session_id": "s",
		"argv": []string{"/bin/sh", "-i"}, "terminal": rpc.ExecTerminal{Rows: 24, Cols: 80, Term: "xterm"}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	go io.Copy(io.Discard, x.Stderr)
	if x.Run.RunID == "" || x.Run.State != "running" {
		t.Fatalf("started run: %+v", x.Run)
	}
	io.WriteString(x, "echo answer=$((6*7)) term=$TERM; stty size\n")
	testenv.ReadUntil(t, x.Stdout, "24 80")
	if err := x.Resize(40, 132); err != nil {
		t.Fatal(err)
	}
	io.WriteString(x, "stty size; pwd; exit 3\n")
	out := testenv.ReadUntil(t, x.Stdout, "40 132")
	if _, err := io.ReadAll(x.Stdout); err != nil {
		t.Fatalf("stdout after the shell: %v", err)
	}
	end := waitExec(t, x)
	if end.State != "exited" || end.ExitCode == nil || *end.ExitCode != 3 {
		t.Fatalf("final record %+v (exit code %v), want exited with 3; terminal output %q", end, exitCode(end), out)
	}
}

func exitCode(r rpc.Run) any {
	if r.ExitCode == nil {
		return nil
	}
	return *r.ExitCode
}

// Pipes: stdin to its EOF, stdout and stderr apart, the exit status after all of the output.
func TestExecPipes(t *testing.T) {
	c, url := execDaemon(t)
	x, err := c.Exec(context.Background(), map[string]any{"agent_id": "a", "session_id": "s",
		"argv": []string{"/bin/sh", "-c", "tr a-z A-Z; echo warned >&2; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	errs := make(chan string, 1)
	go func() { b, _ := io.ReadAll(x.Stderr); errs <- string(b) }()
	io.WriteString(x, "hello ")
	io.WriteString(x, "world\n")
	x.CloseStdin()
	out, err := io.ReadAll(x.Stdout)
	if err != nil || string(out) != "HELLO WORLD\n" {
		t.Fatalf("stdout %q, %v", out, err)
	}
	if e := <-errs; e != "warned\n" {
		t.Fatalf("stderr %q", e)
	}
	end := waitExec(t, x)
	if end.State != "exited" || *end.ExitCode != 5 {
		t.Fatalf("final record %+v, want exited with 5", end)
	}
	var rec rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.get","params":{"run_id":"`+end.RunID+`"}}`), &rec))
	if rec.State != "exited" || *rec.ExitCode != 5 || rec.Attached != "pipes" {
		t.Fatalf("process.get of the attached run: %+v, want exited 5, attached pipes", rec)
	}
}

// A caller that goes away before its run has ended takes the run (its whole cgroup) with it.
func TestExecCallerGoneKillsRun(t *testing.T) {
	c, url := execDaemon(t)
	x, err := c.Exec(context.Background(), map[string]any{"agent_id": "a", "session_id": "s",
		"argv": []string{"/bin/sh", "-c", "sleep 300 & echo up; sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.ReadUntil(t, x.Stdout, "up")
	x.Close()
	var rec rpc.Run
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+x.Run.RunID+`","timeout":30}}`), &rec))
	if rec.State != "killed" {
		t.Fatalf("the run of a caller that went away: %+v, want killed", rec)
	}
}

// Bad requests are refused before anything runs, naming the field.
func TestExecRefusals(t *testing.T) {
	c, url := execDaemon(t)
	for _, tc := range []struct {
		name   string
		params map[string]any
		field  string
	}{
		{"stdin bytes", map[string]any{"agent_id": "a", "session_id": "s", "argv": []string{"/bin/true"}, "stdin": "x"}, "stdin"},
		{"zero rows", map[string]any{"agent_id": "a", "session_id": "s", "argv": []string{"/bin/true"}, "terminal": rpc.ExecTerminal{Cols: 80}}, "terminal"},
		{"TERM twice", map[string]any{"agent_id": "a", "session_id": "s", "argv": []string{"/bin/true"}, "env": map[string]string{"TERM": "vt100"}, "terminal": rpc.ExecTerminal{Rows: 1, Cols: 1, Term: "xterm"}}, "params.terminal.term"},
		{"unknown session", map[string]any{"agent_id": "a", "session_id": "nope", "argv": []string{"/bin/true"}}, "session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Exec(context.Background(), tc.params)
			var rerr *rpc.Error
			if !errors.As(err, &rerr) || !strings.Contains(rerr.Field+" "+rerr.Message, tc.field) {
				t.Fatalf("Exec: %v; want an RPC error naming %q", err, tc.field)
			}
		})
	}
	// process.exec without asking for the stream: refused naming the header
	_, rerr := post(t, url, `{"action":"process.exec","params":{"agent_id":"a","session_id":"s","argv":["/bin/true"]}}`)
	if rerr == nil || rerr.Field != "Upgrade" {
		t.Fatalf("process.exec without Upgrade: %+v", rerr)
	}
	var list struct{ Runs []rpc.Run }
	must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.list","params":{"agent_id":"a","session_id":"s"}}`), &list))
	if len(list.Runs) != 0 {
		t.Fatalf("refused requests left runs: %+v", list.Runs)
	}
}
