package daemon_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/entry"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// Attack: bytes that are not the protocol. Each is refused with a bad_request or the connection
// is dropped; the daemon keeps serving and nothing changed.
func TestMalformedRequestsChangeNothing(t *testing.T) {
	f := newDaemon(t, boxConfig)
	f.must(f.mgmt(), "start", "keep", "--instance", "host", "--", "sleep", "30")
	for _, line := range []string{
		`not json`,
		`{"op":"frobnicate"}`,
		`{"op":"clean","args":{"name":"keep","forse":true}}`,
		`{"op":"clean","args":"keep"}`,
		`{"op":"start","args":{"name":"x","instance":"host","argv":["sleep","1"],"uid":0}}`,
	} {
		uc, err := entry.Dial(f.entry("agent"))
		if err != nil {
			t.Fatal(err)
		}
		c := wire.NewConn(uc)
		if _, err := uc.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		var resp wire.Response
		_ = uc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := c.Recv(&resp); err == nil && (resp.Error == nil || resp.Error.Code != wire.CodeBadRequest) {
			t.Errorf("%s: answered %+v, want bad_request", line, resp)
		}
		uc.Close()
	}
	if st := f.must(f.mgmt(), "status", "keep"); !strings.Contains(st, "running") {
		t.Fatalf("state changed: %s", st)
	}
	if out := f.must(f.mgmt(), "ls"); strings.Contains(out, "x\t") {
		t.Fatalf("a malformed start created a terminal:\n%s", out)
	}
}

// Attack: a message larger than the protocol's bound, to make the daemon buffer without limit.
func TestOversizedMessageIsDropped(t *testing.T) {
	f := newDaemon(t, boxConfig)
	uc, err := entry.Dial(f.entry("agent"))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	go func() {
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		_, _ = uc.Write([]byte(`{"op":"ls","args":"`))
		for range (wire.MaxLine >> 20) + 4 {
			if _, err := uc.Write(chunk); err != nil {
				return
			}
		}
	}()
	_ = uc.SetReadDeadline(time.Now().Add(20 * time.Second))
	var resp wire.Response
	if err := wire.NewConn(uc).Recv(&resp); err == nil {
		t.Fatalf("an oversized message was answered: %+v", resp)
	}
	f.must(f.entry("agent"), "ls")
}
