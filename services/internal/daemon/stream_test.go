package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
)

// TestStreamAction checks a Stream action end to end over a real HTTP server: the client's
// stream is switched to bytes and relayed; a refusal is an ordinary error reply; a call that does
// not ask for the stream is refused naming the header.
func TestStreamAction(t *testing.T) {
	r := NewRouter()
	relayed := make(chan error, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Register("echo.stream", Action{Stream: true, Handler: func(_ context.Context, c *Call) (any, error) {
		var p struct {
			Refuse bool `json:"refuse"`
		}
		if err := rpc.DecodeParams(c.Params, &p); err != nil {
			return nil, err
		}
		if p.Refuse {
			return nil, rpc.Errorf(rpc.CodeForbidden, "params.refuse", "refused as asked")
		}
		return plugin.Relay(func(conn io.ReadWriteCloser) error {
			defer conn.Close()
			_, err := io.Copy(conn, conn) // echo until the client closes its side
			relayed <- err
			return err
		}), nil
	}}))
	srv := httptest.NewServer(NewHandler(r, Loopback, "", slog.New(slog.DiscardHandler)))
	defer srv.Close()
	c := rpc.NewClient(srv.URL, "", nil)

	s, err := c.Stream(context.Background(), "echo.stream", nil)
	must(err)
	if _, err := io.WriteString(s, "hello over the stream\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("hello over the stream\n"))
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hello over the stream\n" {
		t.Fatalf("echo = %q, %v", buf, err)
	}
	s.Close()
	if err := <-relayed; err != nil {
		t.Errorf("relay ended with %v", err)
	}

	_, err = c.Stream(context.Background(), "echo.stream", map[string]any{"refuse": true})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeForbidden || re.Field != "params.refuse" {
		t.Errorf("refused stream = %v, want the handler's forbidden error", err)
	}
	err = c.Call(context.Background(), "echo.stream", nil, nil)
	if !errors.As(err, &re) || re.Field != "Upgrade" || !strings.Contains(re.Message, "Upgrade: allox-stream") {
		t.Errorf("stream action without the upgrade = %v, want refused naming the Upgrade header", err)
	}
}
