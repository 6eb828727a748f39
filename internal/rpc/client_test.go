package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// echo is a minimal server in the daemon's shape: it decodes the request strictly and answers with
// the params as the result, or with an error when the action says so.
func echo(t *testing.T, wantToken string) *httptest.Server {
	t.Helper()
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		if r.URL.Path != Path || r.Method != http.MethodPost || r.Header.Get("Content-Type") != ContentType {
			t.Errorf("request %s %s content-type %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		if got := r.Header.Get("Authorization"); got != wantToken {
			t.Errorf("Authorization = %q, want %q", got, wantToken)
		}
		req, err := DecodeRequest(r.Body)
		var resp Response
		switch {
		case err != nil:
			resp.Error = err.(*Error)
		case req.Action == "fail":
			resp.Error = &Error{Code: CodeNotFound, Message: "no such agent", Field: "params.agent_id"}
		case req.Action == "garbage":
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>bad gateway</html>")
			return
		default:
			resp.OK, resp.Result = true, req.Params
		}
		if resp.Error != nil {
			w.WriteHeader(resp.Error.Code.HTTPStatus())
		}
		json.NewEncoder(w).Encode(resp)
	}))
}

func TestClientCall(t *testing.T) {
	srv := echo(t, "Bearer s3cret")
	defer srv.Close()
	c := NewClient(srv.URL+"/", "s3cret", srv.Client())
	ctx := context.Background()

	var got map[string]string
	if err := c.Call(ctx, "a.b", map[string]string{"agent_id": "x"}, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"agent_id": "x"}, got); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
	var empty map[string]any
	if err := c.Call(ctx, "a.b", nil, &empty); err != nil || len(empty) != 0 {
		t.Errorf("Call with nil params: result %v, err %v; want {} and nil", empty, err)
	}
	if err := c.Call(ctx, "a.b", nil, nil); err != nil {
		t.Errorf("Call with nil result: %v", err)
	}
}

func TestClientErrors(t *testing.T) {
	srv := echo(t, "")
	defer srv.Close()
	c := NewClient(srv.URL, "", nil)
	ctx := context.Background()

	err := c.Call(ctx, "fail", nil, nil)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Call(fail) = %v (%T), want *rpc.Error", err, err)
	}
	want := &Error{Code: CodeNotFound, Message: "no such agent", Field: "params.agent_id", Status: http.StatusNotFound}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("error mismatch (-want +got):\n%s", diff)
	}
	if !errors.Is(err, CodeNotFound) {
		t.Error("errors.Is(err, CodeNotFound) = false")
	}

	err = c.Call(ctx, "garbage", nil, nil)
	if err == nil || errors.As(err, &e) || !strings.Contains(err.Error(), "not an RPC response") {
		t.Errorf("Call(garbage) = %v, want a plain error saying the reply is not an RPC response", err)
	}

	err = c.Call(ctx, "a.b", func() {}, nil)
	if err == nil || !strings.Contains(err.Error(), "encode params") {
		t.Errorf("Call with unencodable params = %v", err)
	}

	var wrong []int
	err = c.Call(ctx, "a.b", map[string]int{"x": 1}, &wrong)
	if err == nil || !strings.Contains(err.Error(), "decode result") {
		t.Errorf("Call decoding an object into a slice = %v", err)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Call(canceled, "a.b", nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Call with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestUnixClient(t *testing.T) {
	dir, err := os.MkdirTemp("", "rpc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := echo(t, "")
	defer srv.Close()
	go http.Serve(ln, srv.Config.Handler)
	defer ln.Close()
	c := NewUnixClient(filepath.Join(dir, "s.sock"))
	var got map[string]string
	if err := c.Call(t.Context(), "echo.run", map[string]string{"k": "v"}, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"k": "v"}, got); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	if err := NewUnixClient(filepath.Join(dir, "none.sock")).Call(t.Context(), "echo.run", nil, nil); err == nil || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("call to a missing socket = %v, want an error naming it", err)
	}
}
