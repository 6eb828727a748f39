package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/daemon"
	api "github.com/allox-os/allox/services/internal/plugin"
)

// streamSocket serves network.connect on a unix socket with the daemon's own router and HTTP
// handler: the relay reads the client's bytes to EOF (which only a half-close gives it), then
// answers them reversed and half-closes in turn; port 7 is refused.
func streamSocket(t *testing.T) (path string, got chan string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "allox")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path = filepath.Join(dir, "s.sock")
	got = make(chan string, 1)
	r := daemon.NewRouter()
	if err := r.Register("network.connect", daemon.Action{Stream: true, Handler: func(_ context.Context, c *daemon.Call) (any, error) {
		var p struct {
			Host string `json:"host"`
			Port int    `json:"port"`
		}
		if err := rpc.DecodeParams(c.Params, &p); err != nil {
			return nil, err
		}
		if p.Port == 7 {
			return nil, rpc.Errorf(rpc.CodeConflict, "session_id", "session a/s has network mode \"isolated\":\nnetwork connect needs mode \"proxy\"")
		}
		got <- p.Host + ":" + strconv.Itoa(p.Port)
		return api.Relay(func(conn io.ReadWriteCloser) error {
			defer conn.Close()
			in, err := io.ReadAll(conn)
			if err != nil {
				return err
			}
			out := []byte(strings.ToUpper(string(in)))
			if _, err := conn.Write(out); err != nil {
				return err
			}
			return conn.(interface{ CloseWrite() error }).CloseWrite()
		}), nil
	}}); err != nil {
		t.Fatal(err)
	}
	serveRouter(t, r, path)
	return path, got
}

func TestNetworkConnect(t *testing.T) {
	path, got := streamSocket(t)
	t.Setenv("ALLOX_SESSION_SOCKET", path)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"network", "connect", "git.test", "22"}, strings.NewReader("ssh-2.0 hello\n"), &out, io.Discard)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("connect did not end: stdin's EOF never reached the daemon (no half-close), or the answer's end never reached the client")
	}
	if out.String() != "SSH-2.0 HELLO\n" {
		t.Errorf("stdout = %q, want the relay's answer to all of stdin", out.String())
	}
	if h := <-got; h != "git.test:22" {
		t.Errorf("the daemon got %q, want git.test:22", h)
	}

	for _, tc := range []struct {
		args  []string
		err   string
		usage bool
	}{
		{[]string{"network", "connect", "git.test", "7"}, `network.connect: conflict: session a/s has network mode "isolated": network connect needs mode "proxy" (field session_id)`, false},
		{[]string{"network", "connect", "git.test"}, "use: allox network connect HOST PORT", true},
		{[]string{"network", "connect", "git.test", "ssh"}, "PORT must be a TCP port", true},
		{[]string{"network", "connect", "git.test", "0"}, "PORT must be a TCP port", true},
	} {
		err := run(context.Background(), tc.args, strings.NewReader(""), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") || errors.Is(err, errUsage) != tc.usage {
			t.Errorf("%v = %v, want one line with %q (usage %v)", tc.args, err, tc.err, tc.usage)
		}
	}
}

// serveRouter serves the daemon's own RPC handler for r on a unix socket at path, as a session
// socket would, until the test ends.
func serveRouter(t *testing.T, r *daemon.Router, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: daemon.NewHandler(r, daemon.Loopback, "", slog.New(slog.DiscardHandler))}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}
