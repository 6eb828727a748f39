package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
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

// EncodeRequest spells Request out by hand: what it writes must decode as the Request it stands for.
func TestEncodeRequestIsARequest(t *testing.T) {
	for _, args := range []any{nil, SendArgs{Name: "a\"b<\n", Text: "x\x00y", Keys: []string{"Enter"}}} {
		line, err := EncodeRequest("se\"nd", args)
		if err != nil {
			t.Fatal(err)
		}
		if line[len(line)-1] != '\n' || bytes.Count(line, []byte("\n")) != 1 {
			t.Fatalf("not one line: %q", line)
		}
		var req Request
		if err := json.Unmarshal(line, &req); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if req.Op != "se\"nd" {
			t.Fatalf("op %q", req.Op)
		}
		if args == nil {
			if req.Args != nil {
				t.Fatalf("args %s for none", req.Args)
			}
			continue
		}
		got, err := Decode[SendArgs](req.Args)
		if err != nil || got.Name != "a\"b<\n" || got.Text != "x\x00y" || len(got.Keys) != 1 {
			t.Fatalf("%+v %v", got, err)
		}
	}
}

// CallOnce reads a reply however the peer's writes split it (here a large one in small pieces),
// decodes the result, and reports an error reply, a reply that is not JSON and a closed peer.
func TestCallOnce(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 100<<10)
	cases := []struct {
		name, reply string
		check       func(t *testing.T, out []string, err error)
	}{
		{"large result", `{"result":["a","` + string(big) + `"]}` + "\n", func(t *testing.T, out []string, err error) {
			if err != nil || len(out) != 2 || out[0] != "a" || len(out[1]) != len(big) {
				t.Fatalf("%d lines, %v", len(out), err)
			}
		}},
		{"error", `{"error":{"code":"forbidden","message":"no"}}` + "\n", func(t *testing.T, out []string, err error) {
			if !errors.Is(err, &Error{Code: CodeForbidden}) {
				t.Fatalf("%v", err)
			}
		}},
		{"not JSON", "{nope\n", func(t *testing.T, out []string, err error) {
			if err == nil || !strings.Contains(err.Error(), "not valid JSON") {
				t.Fatalf("%v", err)
			}
		}},
		{"closed early", `{"result":`, func(t *testing.T, out []string, err error) {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%v", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			go func() {
				defer b.Close()
				req, err := bufio.NewReader(b).ReadBytes('\n')
				if err != nil || !bytes.HasPrefix(req, []byte(`{"op":"screen"`)) {
					return
				}
				for r := []byte(c.reply); len(r) > 0; {
					n := min(len(r), 1000)
					if _, err := b.Write(r[:n]); err != nil {
						return
					}
					r = r[n:]
				}
			}()
			var out []string
			err := CallOnce(a, "screen", ScreenArgs{Name: "t"}, &out)
			c.check(t, out, err)
		})
	}
}
