package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/daemon"
	api "github.com/allox-os/allox/services/internal/plugin"
)

// shareSocket serves the share actions with the daemon's own router and handler over one file
// store: files is the target agent-b/session-1's scope; calls records every call's params.
// A target other than agent-b/session-1 is refused as not enabled; a write of more than 16
// bytes is refused as too large after the daemon has read them.
func shareSocket(t *testing.T, files map[string]string) (path string, calls chan string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "allox")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path = filepath.Join(dir, "s.sock")
	calls = make(chan string, 64)
	type params struct {
		Target     string `json:"target"`
		Path       string `json:"path"`
		Scope      string `json:"scope"`
		Permission string `json:"permission"`
		Size       int64  `json:"size"`
	}
	decode := func(c *daemon.Call) (params, error) {
		var p params
		if err := rpc.DecodeParams(c.Params, &p); err != nil {
			return p, err
		}
		calls <- c.Action + " " + string(c.Params)
		if p.Target != "" && p.Target != "agent-b/session-1" {
			return p, rpc.Errorf(rpc.CodeForbidden, "target", "session %s has not enabled share", p.Target)
		}
		return p, nil
	}
	r := daemon.NewRouter()
	plain := func(_ context.Context, c *daemon.Call) (any, error) {
		p, err := decode(c)
		if err != nil {
			return nil, err
		}
		if c.Action == "share.stat" {
			content, ok := files[p.Path]
			if !ok {
				return nil, rpc.Errorf(rpc.CodeNotFound, "path", "no file %s in the scope", p.Path)
			}
			return map[string]any{"path": p.Path, "size": len(content)}, nil
		}
		return map[string]any{"enabled": true, "scope": p.Scope, "permission": p.Permission}, nil
	}
	for _, a := range []string{"share.enable", "share.disable", "share.status", "share.ls", "share.stat"} {
		if err := r.Register(a, daemon.Action{Handler: plain}); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Register("share.read", daemon.Action{Stream: true, Handler: func(_ context.Context, c *daemon.Call) (any, error) {
		p, err := decode(c)
		if err != nil {
			return nil, err
		}
		content, ok := files[p.Path]
		if !ok {
			return nil, rpc.Errorf(rpc.CodeNotFound, "path", "no file %s in the scope", p.Path)
		}
		return api.Relay(func(conn io.ReadWriteCloser) error {
			defer conn.Close()
			switch p.Path {
			case "cut.txt": // the header promises more than comes
				_, err := io.WriteString(conn, "{\"size\":100}\n"+content)
				return err
			case "changed.txt": // all bytes, then a failing trailer
				_, err := fmt.Fprintf(conn, "{\"size\":%d}\n%s{\"ok\":false,\"code\":\"conflict\",\"error\":\"the file changed while it was read\"}\n", len(content), content)
				return err
			}
			_, err := fmt.Fprintf(conn, "{\"size\":%d}\n%s{\"ok\":true,\"bytes\":%d}\n", len(content), content, len(content))
			return err
		}), nil
	}}))
	must(r.Register("share.write", daemon.Action{Stream: true, Handler: func(_ context.Context, c *daemon.Call) (any, error) {
		p, err := decode(c)
		if err != nil {
			return nil, err
		}
		return api.Relay(func(conn io.ReadWriteCloser) error {
			defer conn.Close()
			in, err := io.ReadAll(io.LimitReader(conn, p.Size))
			if err != nil {
				return err
			}
			if len(in) > 16 {
				_, err = fmt.Fprintf(conn, "{\"ok\":false,\"error\":\"too large: %d bytes, at most 16 per request\"}\n", len(in))
				return err
			}
			files[p.Path] = string(in)
			_, err = fmt.Fprintf(conn, "{\"ok\":true,\"bytes\":%d}\n", len(in))
			return err
		}), nil
	}}))
	serveRouter(t, r, path)
	return path, calls
}

func TestShare(t *testing.T) {
	files := map[string]string{"report.txt": "the report\n", "cut.txt": "12345", "changed.txt": "abc"}
	sock, calls := shareSocket(t, files)
	t.Setenv("ALLOX_SESSION_SOCKET", sock)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "notes.txt"), []byte("from a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args        []string
		stdin       string
		stdout, err string
		usage       bool
		call        string // the call the daemon got, "" for none
	}{
		{args: []string{"share", "enable"}, stdout: `"enabled": true`, call: `share.enable {}`},
		{args: []string{"share", "enable", "--scope", "output", "--permission=write"}, stdout: `"permission": "write"`, call: `share.enable {"scope":"output","permission":"write"}`},
		{args: []string{"share", "disable"}, stdout: `"enabled"`, call: `share.disable {}`},
		{args: []string{"share", "status"}, stdout: `"enabled"`, call: `share.status {}`},
		{args: []string{"share", "ls", "agent-b/session-1"}, stdout: `"enabled"`, call: `share.ls {"target":"agent-b/session-1","path":"."}`},
		{args: []string{"share", "stat", "agent-b/session-1", "report.txt"}, stdout: `"size": 11`, call: `share.stat {"target":"agent-b/session-1","path":"report.txt"}`},
		{args: []string{"share", "read", "agent-b/session-1", "report.txt"}, stdout: "the report\n", call: `share.read {"target":"agent-b/session-1","path":"report.txt"}`},
		{args: []string{"share", "write", "agent-b/session-1", "out.txt"}, stdin: "from stdin", stdout: `"bytes": 10`, call: `share.write {"target":"agent-b/session-1","path":"out.txt","size":10}`},
		{args: []string{"share", "write", "agent-b/session-1", "-i", filepath.Join(work, "notes.txt"), "file.txt"}, stdout: `"bytes": 11`, call: `share.write {"target":"agent-b/session-1","path":"file.txt","size":11}`},

		{args: []string{"share", "read", "agent-a/session-1", "report.txt"}, err: "share read agent-a/session-1 report.txt: forbidden: session agent-a/session-1 has not enabled share (field target)", call: `share.read {"target":"agent-a/session-1","path":"report.txt"}`},
		{args: []string{"share", "read", "agent-b/session-1", "gone.txt"}, err: "share read agent-b/session-1 gone.txt: not_found: no file gone.txt in the scope", call: `share.read {"target":"agent-b/session-1","path":"gone.txt"}`},
		{args: []string{"share", "stat", "agent-b/session-1", "gone.txt"}, err: "share stat agent-b/session-1 gone.txt: not_found: no file gone.txt", call: `share.stat {"target":"agent-b/session-1","path":"gone.txt"}`},
		{args: []string{"share", "write", "agent-b/session-1", "big.txt"}, stdin: strings.Repeat("x", 17), err: "share write agent-b/session-1 big.txt: too large: 17 bytes, at most 16 per request", call: `share.write {"target":"agent-b/session-1","path":"big.txt","size":17}`},
		{args: []string{"share", "read", "agent-b/session-1", "cut.txt"}, stdout: "12345", err: "share read agent-b/session-1 cut.txt: the transfer was cut after 5 of 100 bytes", call: `share.read {"target":"agent-b/session-1","path":"cut.txt"}`},
		{args: []string{"share", "read", "agent-b/session-1", "changed.txt"}, stdout: "abc", err: "share read agent-b/session-1 changed.txt: conflict: the file changed while it was read", call: `share.read {"target":"agent-b/session-1","path":"changed.txt"}`},
		{args: []string{"share", "write", "agent-b/session-1", "x", "-i", filepath.Join(work, "none")}, err: "share write agent-b/session-1 x: -i " + filepath.Join(work, "none")},

		{args: []string{"share", "read", "agent-b", "report.txt"}, err: "TARGET is AGENT/SESSION", usage: true},
		{args: []string{"share", "read", "agent-b/session-1"}, err: "use: allox share read TARGET PATH", usage: true},
		{args: []string{"share", "read", "agent-b/session-1", "a", "-o"}, err: "-o needs a FILE", usage: true},
		{args: []string{"share", "enable", "--permission", "all"}, err: `--permission "all": use read or write`, usage: true},
		{args: []string{"share", "enable", "--mode", "x"}, err: `unknown flag "--mode"`, usage: true},
		{args: []string{"share", "status", "x"}, err: "use: allox share status", usage: true},
		{args: []string{"share", "stat", "agent-b/session-1"}, err: "use: allox share stat TARGET PATH", usage: true},
	} {
		var out bytes.Buffer
		err := run(context.Background(), tc.args, strings.NewReader(tc.stdin), &out, io.Discard)
		if tc.err == "" && err != nil {
			t.Errorf("%v: %v", tc.args, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") || errors.Is(err, errUsage) != tc.usage) {
			t.Errorf("%v = %v, want one line with %q (usage %v)", tc.args, err, tc.err, tc.usage)
		}
		if !strings.Contains(out.String(), tc.stdout) {
			t.Errorf("%v: stdout %q, want %q", tc.args, out.String(), tc.stdout)
		}
		got := ""
		select {
		case got = <-calls:
		default:
		}
		if got != tc.call {
			t.Errorf("%v: the daemon got %q, want %q", tc.args, got, tc.call)
		}
	}
	if files["out.txt"] != "from stdin" || files["file.txt"] != "from a file" {
		t.Errorf("written: %q", files)
	}
	if _, ok := files["big.txt"]; ok {
		t.Error("a refused write was stored")
	}

	// -o writes into the caller's own workspace, whole or not at all.
	dst := filepath.Join(work, "copy.txt")
	if err := run(context.Background(), []string{"share", "read", "agent-b/session-1", "report.txt", "-o", dst}, nil, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	<-calls
	if b, err := os.ReadFile(dst); err != nil || string(b) != "the report\n" {
		t.Errorf("-o: %q, %v", b, err)
	}
	if _, err := os.Stat(dst + ".allox-share-tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
	// A cut read leaves -o's file as it was, and no temporary file.
	err := run(context.Background(), []string{"share", "read", "agent-b/session-1", "cut.txt", "-o", dst}, nil, io.Discard, io.Discard)
	<-calls
	if err == nil || !strings.Contains(err.Error(), "cut after 5 of 100 bytes") {
		t.Errorf("cut read -o: %v", err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "the report\n" {
		t.Errorf("a cut read -o changed the file: %q, %v", b, err)
	}
	if _, err := os.Stat(dst + ".allox-share-tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left after a cut read: %v", err)
	}
	// stdin redirected from a regular file is sent as it is, with its size.
	in, err := os.Open(filepath.Join(work, "notes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := run(context.Background(), []string{"share", "write", "agent-b/session-1", "fromfile.txt"}, in, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := <-calls; got != `share.write {"target":"agent-b/session-1","path":"fromfile.txt","size":11}` {
		t.Errorf("write from a regular stdin: the daemon got %s", got)
	}
}

// TestShareNotEnabled: a daemon without the plugin answers unknown_action, and the client says
// how the plugin is enabled, for the typed subcommands too.
func TestShareNotEnabled(t *testing.T) {
	t.Setenv("ALLOX_SESSION_SOCKET", fakeSocket(t))
	for _, args := range [][]string{{"share", "enable"}, {"share", "read", "agent-b/session-1", "report.txt"}, {"share", "write", "agent-b/session-1", "x"}, {"share", "stat", "a/b", "x"}} {
		err := run(context.Background(), args, strings.NewReader("x"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "the session share plugin is not enabled in this appliance: the workspace daemon enables it with --share-tools") {
			t.Errorf("%v = %v, want not enabled", args, err)
		}
	}
}
