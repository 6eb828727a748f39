package rpc

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseRequest checks that the decoder never panics, that it fails only with the envelope's
// error codes, and that whatever it accepts survives a round trip unchanged.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"action":"system.info","params":{}}`,
		`{"action":"system.info"}`,
		`{"params":null,"action":"a.b"}`,
		`{"action":"a.b","params":{"x":[1,2,{"y":"\u00e9"}]}}`,
		`{"action":"a.b","action":"c"}`,
		`{"action":"a.b"} {}`,
		`[]`, ``, `{`, `{"action":1}`, `{"Action":"a"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := ParseRequest(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Code != CodeInvalidRequest && e.Code != CodeTooLarge) || e.Message == "" {
				t.Fatalf("ParseRequest(%q) error = %#v, want *Error with an envelope code and a message", data, err)
			}
			return
		}
		if req.Action == "" || len(req.Action) > MaxActionBytes || !json.Valid(req.Params) || jsonKind(req.Params) != "object" {
			t.Fatalf("ParseRequest(%q) accepted %+v", data, req)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := ParseRequest(again)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", again, err)
		}
		if req2.Action != req.Action {
			t.Fatalf("round trip changed the action: %q -> %q", req.Action, req2.Action)
		}
		var p1, p2 any
		if err := json.Unmarshal(req.Params, &p1); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(req2.Params, &p2); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(p1, p2); diff != "" {
			t.Fatalf("round trip changed params (-first +second):\n%s", diff)
		}
	})
}
