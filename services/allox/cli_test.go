package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// fakeSocket serves the envelope on a unix socket: it answers unknown_action for the share and
// network plugins' domains and for monitor.tail (no such action), and echoes {"action", "params"}
// otherwise. The client is tested against the real
// daemon in services/workspace-daemon (TestSessionSocket) and in the guest.
func fakeSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "allox")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := rpc.DecodeRequest(r.Body)
		if err != nil {
			t.Errorf("request: %v", err)
			return
		}
		resp := rpc.Response{OK: true}
		if d, _, _ := strings.Cut(req.Action, "."); d == "share" || d == "network" || req.Action == "monitor.tail" {
			resp = rpc.Response{Error: &rpc.Error{Code: rpc.CodeUnknownAction, Message: "unknown action", Field: "action"}}
			w.WriteHeader(404)
		} else {
			resp.Result, _ = json.Marshal(map[string]any{"action": req.Action, "params": req.Params})
		}
		json.NewEncoder(w).Encode(resp)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path
}

func TestRun(t *testing.T) {
	t.Setenv("ALLOX_SESSION_SOCKET", fakeSocket(t))
	for _, tt := range []struct {
		args           []string
		stdin          string
		stdout, errMsg string
		usage          bool
	}{
		{args: []string{"session", "info"}, stdout: `"action": "session.info"`},
		{args: []string{"turn", "begin", "7"}, stdout: `"turn_id": "7"`},
		{args: []string{"turn", "begin", "7", "--label", "task=fix"}, stdout: `"task": "fix"`},
		{args: []string{"turn", "begin", "7", "--label", "task"}, errMsg: "--label KEY=VALUE", usage: true},
		{args: []string{"monitor", "span", "read_file", "--attr", "n=3", "--duration-ms", "5"}, stdout: `"n": 3`},
		{args: []string{"monitor", "metric", "tokens", "12", "--unit", "{token}"}, stdout: `"value": 12`},
		{args: []string{"monitor", "metric", "tokens", "many"}, errMsg: "VALUE must be a number", usage: true},
		{args: []string{"monitor", "span"}, errMsg: "use: allox monitor", usage: true},
		{args: []string{"monitor", "span", "x", "--attr", "novalue"}, errMsg: "use KEY=VALUE", usage: true},
		{args: []string{"turn", "end", "7", "--failed"}, stdout: `"success": false`},
		{args: []string{"turn", "end", "7"}, stdout: `"success": true`},
		{args: []string{"call", "x.y", `{"k":1}`}, stdout: `"k": 1`},
		{args: []string{"call", "x.y", "-"}, stdin: `{"k":2}`, stdout: `"k": 2`},
		{args: []string{"share", "status"}, errMsg: "share: the session share plugin is not enabled in this appliance: the workspace daemon enables it with --share-tools"},
		{args: []string{"network", "connect", "example", "22"}, errMsg: "enables it with --session-network isolated|proxy"},
		{args: []string{"monitor", "tail"}, errMsg: "enables it with --monitor-root DIR"},
		{args: nil, errMsg: "name a subcommand", usage: true},
		{args: []string{"sesion"}, errMsg: `unknown subcommand "sesion"`, usage: true},
		{args: []string{"turn", "end", "7", "--fail"}, errMsg: "allox turn end ID [--failed]", usage: true},
		{args: []string{"call", "x.y", "{"}, errMsg: "the params are not JSON", usage: true},
		{args: []string{"share"}, errMsg: "use: allox share", usage: true},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), tt.args, strings.NewReader(tt.stdin), &out, &bytes.Buffer{})
			if tt.errMsg == "" {
				if err != nil || !strings.Contains(out.String(), tt.stdout) {
					t.Errorf("err %v, stdout %q; want %q", err, out.String(), tt.stdout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errMsg) || errors.Is(err, errUsage) != tt.usage || strings.Contains(err.Error(), "\n") {
				t.Errorf("err %v (usage %v); want one line with %q (usage %v)", err, errors.Is(err, errUsage), tt.errMsg, tt.usage)
			}
		})
	}
}

func TestNoSocket(t *testing.T) {
	t.Setenv("ALLOX_SESSION_SOCKET", "/nonexistent/session.sock")
	err := run(t.Context(), []string{"session", "info"}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no session socket at /nonexistent/session.sock: run allox inside a run of a session") {
		t.Errorf("err %v", err)
	}
}
