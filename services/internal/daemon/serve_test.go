package daemon

import (
	"context"
	"errors"
	"log/slog"
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
	go func() { done <- Serve(ctx, cfg, r, slog.New(rec)) }()
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
			if strings.Contains(rec.text(), "HOST LISTENER NOT STARTED") { // logged before any listener
				want = 1
			}
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

func TestServeWithoutToken(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []*string{nil, ptr(""), ptr("\n")} {
		tokenFile := filepath.Join(dir, "token")
		os.Remove(tokenFile)
		if content != nil {
			mustWrite(t, tokenFile, []byte(*content))
		}
		addrs, rec, stop := serve(t, Config{Root: dir, Listen: "127.0.0.1:0", ListenHost: "127.0.0.1:0", TokenFile: tokenFile})
		if _, ok := addrs["host"]; ok || addrs["loopback"] == "" {
			t.Errorf("token file %v: listeners %v, want loopback only", content, addrs)
		}
		if !strings.Contains(rec.text(), "WARN HOST LISTENER NOT STARTED") {
			t.Errorf("no loud warning; log:\n%s", rec.text())
		}
		if err := stop(); err != nil {
			t.Errorf("Serve = %v", err)
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
