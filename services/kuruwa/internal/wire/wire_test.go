package wire

import (
	"bytes"
	"encoding/json"
	"net"
	"testing"
)

// Terminal output is arbitrary bytes (invalid UTF-8, NULs, escapes): a frame carries it one to
// one, and a message that is not JSON is an error, never a panic.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add([]byte("plain"), []byte(`{"op":"ls"}`))
	f.Add([]byte{0xff, 0x00, 0x1b, '[', 'H', 0xc3}, []byte(`{"op":"send","args":{"name":"x","bogus":1}}`))
	f.Fuzz(func(t *testing.T, out []byte, line []byte) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		ca, cb := NewConn(a), NewConn(b)
		go func() { _ = ca.Send(Frame{Seq: 7, Output: out}) }()
		var got Frame
		if err := cb.Recv(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Output, out) || got.Seq != 7 {
			t.Fatalf("sent %q, received %q", out, got.Output)
		}
		go func() { _, _ = a.Write(append(bytes.ReplaceAll(line, []byte("\n"), nil), '\n')) }()
		var req Request
		if err := cb.Recv(&req); err == nil {
			_, _ = Decode[struct {
				Name string `json:"name"`
			}](req.Args)
		}
	})
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	type args struct {
		Name string `json:"name"`
	}
	if _, err := Decode[args](json.RawMessage(`{"name":"a","nmae":"b"}`)); err == nil {
		t.Fatal("a misspelt argument was accepted")
	}
	if v, err := Decode[args](json.RawMessage(`{"name":"a"}`)); err != nil || v.Name != "a" {
		t.Fatalf("%v %v", v, err)
	}
}
