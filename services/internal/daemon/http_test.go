package daemon

import (
	"bytes"
	stdcmp "cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/system"
)

const testToken = "0123456789abcdef-token"

// fakeSystem is a system.System over temporary /proc and /sys with fake kernel queries; powerOffs
// counts calls of its PowerOff effect.
func fakeSystem(t testing.TB, powerOffs *atomic.Int32) *system.System {
	t.Helper()
	dir := t.TempDir()
	s := system.New(dir, "v0.0.0-test")
	s.ProcDir, s.SysDir, s.ManifestPath = filepath.Join(dir, "proc"), filepath.Join(dir, "sys"), filepath.Join(dir, "manifest.json")
	s.Uname = func() (system.Kernel, error) {
		return system.Kernel{Release: "6.18.2", Version: "#1", Machine: "x86_64"}, nil
	}
	s.Statfs = func(string) (uint32, error) { return unix.BTRFS_SUPER_MAGIC, nil }
	s.Getppid = func() int { return 1 }
	s.PowerOff = func() error { powerOffs.Add(1); return nil }
	mustWrite(t, filepath.Join(s.ProcDir, "sys/kernel/random/boot_id"), []byte("b00710d0-0000-4000-8000-000000000000\n"))
	mustWrite(t, filepath.Join(s.SysDir, "fs/cgroup/cgroup.controllers"), []byte("cpu memory pids\n"))
	mustWrite(t, filepath.Join(s.SysDir, "fs/cgroup/cgroup.subtree_control"), nil)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "CONFIG_IKCONFIG_PROC=y\n")
	zw.Close()
	mustWrite(t, filepath.Join(s.ProcDir, "config.gz"), gz.Bytes())
	return s
}

func mustWrite(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

type testServer struct {
	loopback, host http.Handler
	sys            *system.System
	powerOffs      atomic.Int32
}

func newTestServer(t testing.TB) *testServer {
	t.Helper()
	ts := &testServer{}
	ts.sys = fakeSystem(t, &ts.powerOffs)
	r := NewRouter()
	if err := RegisterSystem(r, ts.sys); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ts.loopback = NewHandler(r, Loopback, "", log)
	ts.host = NewHandler(r, Host, testToken, log)
	return ts
}

type request struct {
	method, path, contentType, auth, body string
}

func (rq request) do(h http.Handler) (*httptest.ResponseRecorder, rpc.Response) {
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	if rq.path == "" {
		rq.path = rpc.Path
	}
	req := httptest.NewRequest(rq.method, rq.path, strings.NewReader(rq.body))
	if rq.contentType != "-" {
		req.Header.Set("Content-Type", stdcmp.Or(rq.contentType, rpc.ContentType))
	}
	if rq.auth != "" {
		req.Header.Set("Authorization", rq.auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var resp rpc.Response
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		resp.Error = &rpc.Error{Code: "BODY-NOT-RPC-JSON", Message: w.Body.String()}
	}
	return w, resp
}

func TestHandlerErrors(t *testing.T) {
	ts := newTestServer(t)
	big := `{"action":"system.info","params":{"x":"` + strings.Repeat("x", rpc.MaxRequestBytes) + `"}}`
	for _, tt := range []struct {
		name   string
		req    request
		host   bool
		status int
		code   rpc.Code
		field  string
		header [2]string
	}{
		{"unknown action", request{body: `{"action":"agent.create"}`}, false, 404, rpc.CodeUnknownAction, "action", [2]string{}},
		{"unknown param", request{body: `{"action":"system.info","params":{"verbose":true}}`}, false, 400, rpc.CodeInvalidParams, "params.verbose", [2]string{}},
		{"unknown envelope field", request{body: `{"action":"system.info","verbose":true}`}, false, 400, rpc.CodeInvalidRequest, "verbose", [2]string{}},
		{"bad json", request{body: `{"action":`}, false, 400, rpc.CodeInvalidRequest, "", [2]string{}},
		{"empty body", request{body: ``}, false, 400, rpc.CodeInvalidRequest, "", [2]string{}},
		{"trailing data", request{body: `{"action":"system.info"} {}`}, false, 400, rpc.CodeInvalidRequest, "", [2]string{}},
		{"body too large", request{body: big}, false, 413, rpc.CodeTooLarge, "", [2]string{}},
		{"form content", request{contentType: "application/x-www-form-urlencoded", body: `{"action":"system.info"}`}, false, 415, rpc.CodeUnsupportedMediaType, "Content-Type", [2]string{}},
		{"no content type", request{contentType: "-", body: `{"action":"system.info"}`}, false, 415, rpc.CodeUnsupportedMediaType, "Content-Type", [2]string{}},
		{"GET", request{method: http.MethodGet}, false, 405, rpc.CodeMethodNotAllowed, "", [2]string{"Allow", "POST"}},
		{"other path", request{path: "/v1/rpcx", body: `{"action":"system.info"}`}, false, 404, rpc.CodeNotFound, "", [2]string{}},
		{"poweroff on loopback", request{body: `{"action":"system.poweroff"}`}, false, 403, rpc.CodeForbidden, "action", [2]string{}},
		{"host: no token", request{body: `{"action":"system.info"}`}, true, 401, rpc.CodeUnauthorized, "Authorization", [2]string{"WWW-Authenticate", `Bearer realm="allox"`}},
		{"host: wrong token", request{auth: "Bearer nope", body: `{"action":"system.info"}`}, true, 401, rpc.CodeUnauthorized, "Authorization", [2]string{}},
		{"host: token as basic", request{auth: "Basic " + testToken, body: `{"action":"system.info"}`}, true, 401, rpc.CodeUnauthorized, "Authorization", [2]string{}},
		{"host: auth before path", request{path: "/secret", method: http.MethodGet}, true, 401, rpc.CodeUnauthorized, "Authorization", [2]string{}},
		{"host: poweroff with params", request{auth: "Bearer " + testToken, body: `{"action":"system.poweroff","params":{"force":true}}`}, true, 400, rpc.CodeInvalidParams, "params.force", [2]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := ts.loopback
			if tt.host {
				h = ts.host
			}
			w, resp := tt.req.do(h)
			if w.Code != tt.status || resp.OK || resp.Error == nil || resp.Error.Code != tt.code || resp.Error.Field != tt.field || resp.Error.Message == "" {
				t.Fatalf("HTTP %d %s; want HTTP %d with code %q, field %q and a message", w.Code, w.Body, tt.status, tt.code, tt.field)
			}
			if got := w.Header().Get("Content-Type"); got != rpc.ContentType {
				t.Errorf("Content-Type = %q", got)
			}
			if tt.header[0] != "" && w.Header().Get(tt.header[0]) != tt.header[1] {
				t.Errorf("%s = %q, want %q", tt.header[0], w.Header().Get(tt.header[0]), tt.header[1])
			}
		})
	}
	if n := ts.powerOffs.Load(); n != 0 {
		t.Errorf("PowerOff ran %d times on refused calls", n)
	}
}

func TestSystemInfo(t *testing.T) {
	ts := newTestServer(t)
	ts.sys.Sandbox = system.Sandbox{RunUID: 2000, RunGID: 2001, GuardedPorts: []uint16{8092, 8093}, ManagedExecution: true,
		Seccomp: []system.SeccompRule{{Syscall: "bpf", Number: 321, When: "always", Errno: "EPERM"}}}
	for _, body := range []string{`{"action":"system.info"}`, `{"action":"system.info","params":{}}`, `{"action":"system.info","params":null}`} {
		w, resp := request{body: body}.do(ts.loopback)
		if w.Code != 200 || !resp.OK {
			t.Fatalf("%s: HTTP %d %s", body, w.Code, w.Body)
		}
		var got rpc.SystemInfo
		if err := json.Unmarshal(resp.Result, &got); err != nil {
			t.Fatal(err)
		}
		want := rpc.SystemInfo{
			Daemon: rpc.DaemonInfo{Version: "v0.0.0-test", Pid: os.Getpid()},
			Kernel: rpc.KernelInfo{Release: "6.18.2", Version: "#1", Machine: "x86_64"},
			Store:  rpc.StoreInfo{Root: ts.sys.Root, FSType: "btrfs"},
			Cgroup: rpc.CgroupInfo{Version: 0, Controllers: []string{}, SubtreeControl: []string{}}, // Statfs says btrfs, not cgroup2
			BootID: "b00710d0-0000-4000-8000-000000000000",
			Sandbox: rpc.SandboxInfo{RunUID: 2000, RunGID: 2001, GuardedPorts: []uint16{8092, 8093}, ManagedExecution: true,
				Seccomp: []rpc.SeccompRule{{Syscall: "bpf", Number: 321, When: "always", Args: []rpc.SeccompArg{}, Errno: "EPERM"}}},
			Quarantined: []rpc.QuarantinedSession{}, // an empty list on the wire when none is
			Plugins:     []rpc.PluginInfo{},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("system.info mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestKernelConfig(t *testing.T) {
	ts := newTestServer(t)
	_, resp := request{body: `{"action":"system.kernel_config"}`}.do(ts.loopback)
	var got rpc.KernelConfig
	if err := json.Unmarshal(resp.Result, &got); err != nil || got.Config != "CONFIG_IKCONFIG_PROC=y\n" {
		t.Errorf("system.kernel_config = %+v, %v", got, err)
	}
	os.Remove(filepath.Join(ts.sys.ProcDir, "config.gz"))
	w, resp := request{body: `{"action":"system.kernel_config"}`}.do(ts.loopback)
	if w.Code != http.StatusNotImplemented || resp.Error == nil || resp.Error.Code != rpc.CodeUnsupported || !strings.Contains(resp.Error.Message, "CONFIG_IKCONFIG_PROC=y") {
		t.Errorf("without config.gz: HTTP %d %s; want 501 unsupported naming CONFIG_IKCONFIG_PROC", w.Code, w.Body)
	}
}

func TestPowerOff(t *testing.T) {
	ts := newTestServer(t)
	w, resp := request{auth: "Bearer " + testToken, body: `{"action":"system.poweroff"}`}.do(ts.host)
	if w.Code != 200 || !resp.OK || string(resp.Result) != "{}" {
		t.Fatalf("poweroff on host: HTTP %d %s", w.Code, w.Body)
	}
	if !w.Flushed {
		t.Error("the reply was not flushed")
	}
	if n := ts.powerOffs.Load(); n != 1 {
		t.Errorf("PowerOff ran %d times, want 1", n)
	}

	ts.sys.Getppid = func() int { return 777 }
	w, resp = request{auth: "Bearer " + testToken, body: `{"action":"system.poweroff"}`}.do(ts.host)
	if w.Code != http.StatusNotImplemented || resp.Error == nil || !strings.Contains(resp.Error.Message, "pid 777") {
		t.Errorf("poweroff outside init: HTTP %d %s; want 501 naming the parent", w.Code, w.Body)
	}
	if n := ts.powerOffs.Load(); n != 1 {
		t.Errorf("PowerOff ran %d times after a refused call, want still 1", n)
	}
}

func TestAfterResponseOrder(t *testing.T) {
	r := NewRouter()
	var rec *httptest.ResponseRecorder
	var sawBody bool
	r.Register("test.after", Action{Handler: func(_ context.Context, c *Call) (any, error) {
		c.AfterResponse(func() error {
			sawBody = rec.Flushed && strings.Contains(rec.Body.String(), `"ok":true`)
			return errors.New("effect failed")
		})
		return nil, nil
	}})
	var logs bytes.Buffer
	h := NewHandler(r, Loopback, "", slog.New(slog.NewTextHandler(&logs, nil)))
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, rpc.Path, strings.NewReader(`{"action":"test.after"}`))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	h.ServeHTTP(rec, req)
	if !sawBody {
		t.Error("the after-response effect ran before the reply was written and flushed")
	}
	if !strings.Contains(logs.String(), "effect failed") {
		t.Errorf("the effect's error was not logged:\n%s", logs.String())
	}
}

// FuzzHandler feeds arbitrary bodies through the whole endpoint: every reply must be one RPC
// response whose status agrees with its error code.
func FuzzHandler(f *testing.F) {
	for _, s := range []string{`{"action":"system.info"}`, `{"action":"system.info","params":{"x":1}}`, `{"action":"nope"}`, `{`, `[]`, ``} {
		f.Add([]byte(s))
	}
	ts := newTestServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		w, resp := request{body: string(body)}.do(ts.loopback)
		switch {
		case resp.Error != nil && resp.Error.Code == "BODY-NOT-RPC-JSON":
			t.Fatalf("reply is not an RPC response: %s", w.Body)
		case resp.OK != (resp.Error == nil):
			t.Fatalf("ok=%v with error %+v", resp.OK, resp.Error)
		case resp.OK && w.Code != 200, !resp.OK && w.Code != resp.Error.Code.HTTPStatus():
			t.Fatalf("HTTP %d for %s", w.Code, w.Body)
		}
	})
}
