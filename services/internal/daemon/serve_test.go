package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// recorder is a slog.Handler that keeps records and reports listener addresses as they appear.
type recorder struct {
	mu    sync.Mutex
	msgs  []string
	addrs chan [2]string // origin, addr
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	r.mu.Unlock()
	if rec.Message == "listening" {
		r.addrs <- [2]string{attrs["listener"], attrs["addr"]}
	}
	return nil
}

func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

// serve starts Serve in the background and returns the addresses it listens on, by origin.
func serve(t *testing.T, cfg Config) (addrs map[string]string, rec *recorder, stop func() error) {
	t.Helper()
	var powerOffs atomic.Int32
	r := NewRouter()
	if err := RegisterSystem(r, fakeSystem(t, &powerOffs)); err != nil {
		t.Fatal(err)
	}
	rec = &recorder{addrs: make(chan [2]string, 2)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		ls, err := Listen(cfg)
		if err != nil {
			done <- err
			return
		}
		done <- Serve(ctx, ls, r, slog.New(rec))
	}()
	addrs = map[string]string{}
	want := 1
	if cfg.ListenHost != "" {
		want = 2
	}
	timeout := time.After(10 * time.Second)
	for len(addrs) < want {
		select {
		case a := <-rec.addrs:
			addrs[a[0]] = a[1]
		case err := <-done:
			cancel()
			return addrs, rec, func() error { return err }
		case <-timeout:
			t.Fatalf("Serve did not report its listeners; log:\n%s", rec.text())
		}
	}
	return addrs, rec, func() error { cancel(); return <-done }
}

func TestServeHostListener(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	mustWrite(t, tokenFile, []byte(testToken+"\n"))
	addrs, _, stop := serve(t, Config{Root: dir, Listen: "127.0.0.1:0", ListenHost: "127.0.0.1:0", TokenFile: tokenFile})
	ctx := t.Context()

	var info rpc.SystemInfo
	if err := rpc.NewClient("http://"+addrs["loopback"], "", nil).Call(ctx, rpc.ActionSystemInfo, nil, &info); err != nil {
		t.Errorf("loopback system.info: %v", err)
	}
	err := rpc.NewClient("http://"+addrs["host"], "", nil).Call(ctx, rpc.ActionSystemInfo, nil, &info)
	if !errors.Is(err, rpc.CodeUnauthorized) {
		t.Errorf("host system.info without token = %v, want unauthorized", err)
	}
	if err := rpc.NewClient("http://"+addrs["host"], testToken, nil).Call(ctx, rpc.ActionSystemInfo, nil, &info); err != nil {
		t.Errorf("host system.info with token: %v", err)
	}
	if err := stop(); err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
}

// TestServeWithoutToken: with --listen-host, no token means no daemon. Today's attack was to
// bind the host port that never opened and collect the next host request's bearer token.
func TestServeWithoutToken(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []*string{nil, ptr(""), ptr("\n")} {
		tokenFile := filepath.Join(dir, "token")
		os.Remove(tokenFile)
		if content != nil {
			mustWrite(t, tokenFile, []byte(*content))
		}
		addrs, _, stop := serve(t, Config{Root: dir, Listen: "127.0.0.1:0", ListenHost: "127.0.0.1:0", TokenFile: tokenFile})
		err := stop()
		if err == nil || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), "drop --listen-host") {
			t.Errorf("token file %v: Serve = %v, want a refusal naming --token-file and the fix", content, err)
		}
		if len(addrs) != 0 {
			t.Errorf("token file %v: listeners %v opened before the refusal", content, addrs)
		}
	}
}

// TestListenHoldsThePortsFirst: Listen binds before anything else runs, so the ports are the
// daemon's while it opens its store; a second daemon (or a squatter) cannot have them.
func TestListenHoldsThePortsFirst(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	mustWrite(t, tokenFile, []byte(testToken))
	ls, err := Listen(Config{Root: dir, Listen: "127.0.0.1:0", ListenHost: "127.0.0.1:0", TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	ports := ls.Ports()
	if len(ports) != 2 || ports[0] == 0 || ports[1] == 0 {
		t.Fatalf("Ports = %v, want two bound ports", ports)
	}
	for _, p := range ports {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			l.Close()
			t.Errorf("port %d could be bound by another listener while the daemon holds it", p)
		}
	}
}

func TestServeRefusesReadableToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	mustWrite(t, tokenFile, []byte(testToken))
	os.Chmod(tokenFile, 0o644)
	_, _, stop := serve(t, Config{Root: dir, Listen: "127.0.0.1:0", ListenHost: "127.0.0.1:0", TokenFile: tokenFile})
	if err := stop(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("Serve with a 0644 token file = %v, want a refusal", err)
	}
}

func TestServeListenError(t *testing.T) {
	dir := t.TempDir()
	addrs, _, stop := serve(t, Config{Root: dir, Listen: "127.0.0.1:0"})
	_, _, stop2 := serve(t, Config{Root: dir, Listen: addrs["loopback"]})
	if err := stop2(); err == nil || !strings.Contains(err.Error(), "loopback listener") {
		t.Errorf("second Serve on %s = %v, want a listen error", addrs["loopback"], err)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}
