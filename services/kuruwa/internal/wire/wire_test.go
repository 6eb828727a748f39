package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// rawHistory is a history as a terminal can leave it: newlines, escapes, NULs, invalid UTF-8,
// and text that looks like a message.
var rawHistory = append(bytes.Repeat([]byte("line\n\x1b[1m\x00\xff\xfe"), 5000), `{"result":{}}`+"\n"...)

// serveReply answers every request on b with reply (written in pieces of at most piece bytes)
// until b is closed.
func serveReply(b net.Conn, reply []byte, piece int) {
	defer b.Close()
	r := bufio.NewReader(b)
	for {
		if _, err := r.ReadBytes('\n'); err != nil {
			return
		}
		for p := reply; len(p) > 0; {
			n := min(len(p), piece)
			if _, err := b.Write(p[:n]); err != nil {
				return
			}
			p = p[n:]
		}
	}
}

// replyRaw is the message ReplyRaw sends for res and raw.
func replyRaw(t *testing.T, res any, raw []byte) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() { defer b.Close(); _ = NewConn(b).ReplyRaw(res, raw) }()
	msg, err := io.ReadAll(a)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// A history sent after the reply's line arrives byte for byte in HistoryText, through CallOnce
// (the CLI) however the writes split it, through Call (a pooled connection) without putting the
// connection out of step for the next call even when the caller takes no result, and through
// CallRaw (the main daemon's relay) as exactly what was sent.
func TestRawBytesAfterTheReply(t *testing.T) {
	msg := replyRaw(t, ScreenResult{Snapshot: Snapshot{Cols: 80, Rows: 24}}, rawHistory)
	if i := bytes.IndexByte(msg, '\n'); !bytes.Equal(msg[i+1:], rawHistory) {
		t.Fatalf("ReplyRaw sent %d bytes after its line, want the %d of the history as they are", len(msg)-i-1, len(rawHistory))
	}
	for _, piece := range []int{1 << 20, 4096, 7} {
		a, b := net.Pipe()
		go serveReply(b, msg, piece)
		var res ScreenResult
		if err := CallOnce(a, "screen", ScreenArgs{Name: "t", Scrollback: true}, &res); err != nil {
			t.Fatalf("CallOnce, pieces of %d: %v", piece, err)
		}
		a.Close()
		if res.HistoryText != string(rawHistory) || res.Cols != 80 {
			t.Fatalf("CallOnce, pieces of %d: %d bytes of history, cols %d", piece, len(res.HistoryText), res.Cols)
		}
	}
	a, b := net.Pipe()
	go serveReply(b, msg, 4096)
	c := NewConn(a)
	defer c.Close()
	for i, out := range []*ScreenResult{nil, {}, {}} {
		var err error
		if out == nil {
			err = c.Call("screen", ScreenArgs{Name: "t"}, nil)
		} else {
			err = c.Call("screen", ScreenArgs{Name: "t"}, out)
		}
		if err != nil || (out != nil && out.HistoryText != string(rawHistory)) {
			t.Fatalf("Call %d on one connection: %v", i, err)
		}
	}
	for i := range 2 {
		got, err := c.CallRaw("screen", ScreenArgs{Name: "t"})
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("CallRaw %d: %v; relayed %d bytes, want the %d sent", i, err, len(got), len(msg))
		}
	}
}

// A peer that lies about what follows its line is an error on every reading side: a length below
// zero or above MaxLine (never allocated), fewer bytes than announced, and (on a one-request
// connection) more.
func TestRawLengthMustBeHonest(t *testing.T) {
	cases := []struct {
		name, reply, want string
	}{
		{"negative", `{"result":{},"raw":-1}` + "\n", "announces -1 raw bytes"},
		{"too large", fmt.Sprintf(`{"result":{},"raw":%d}`, MaxLine+1) + "\n", "raw bytes; at most"},
		{"short", `{"result":{},"raw":10}` + "\nabc", "10 raw bytes announced"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for via, call := range map[string]func(net.Conn) error{
				"CallOnce": func(a net.Conn) error { var r ScreenResult; return CallOnce(a, "screen", nil, &r) },
				"Call":     func(a net.Conn) error { var r ScreenResult; return NewConn(a).Call("screen", nil, &r) },
				"CallRaw":  func(a net.Conn) error { _, err := NewConn(a).CallRaw("screen", nil); return err },
			} {
				a, b := net.Pipe()
				go func() {
					_, _ = bufio.NewReader(b).ReadBytes('\n')
					_, _ = b.Write([]byte(c.reply))
					b.Close()
				}()
				err := call(a)
				a.Close()
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v, want an error saying %q", via, err, c.want)
				}
			}
		})
	}
	a, b := net.Pipe()
	go serveReply(b, []byte(`{"result":{},"raw":3}`+"\nabcdef"), 1<<20)
	defer a.Close()
	var r ScreenResult
	if err := CallOnce(a, "screen", nil, &r); err == nil || !strings.Contains(err.Error(), "6 bytes follow a reply that announces 3") {
		t.Fatalf("CallOnce with more bytes than announced: %v", err)
	}
}

// ReplyRaw refuses to send more than a reader takes, with an error reply instead.
func TestReplyRawRefusesMoreThanMaxLine(t *testing.T) {
	msg := replyRaw(t, ScreenResult{}, make([]byte, MaxLine+1))
	var resp Response
	if err := json.Unmarshal(msg, &resp); err != nil || resp.Error == nil || resp.Raw != 0 || !strings.Contains(resp.Error.Message, "history") {
		t.Fatalf("ReplyRaw of MaxLine+1 bytes sent %.200q (%v), want one error line", msg, err)
	}
}

// A reply line is at most MaxLine bytes, its newline included, on every reading side: CallOnce
// grows its buffer past MaxLine only far enough to tell.
func TestReplyLineLongerThanMaxLineIsRefused(t *testing.T) {
	line := func(n int) []byte { // a reply line of n bytes
		return append(append([]byte(`{"result":"`), bytes.Repeat([]byte("x"), n-len(`{"result":""}`)-1)...), "\"}\n"...)
	}
	for _, c := range []struct {
		name string
		n    int
		ok   bool
	}{
		{"MaxLine", MaxLine, true},
		{"MaxLine+1", MaxLine + 1, false},
		{"12 MiB", 12 << 20, false},
	} {
		for via, call := range map[string]func(net.Conn) error{
			"CallOnce": func(a net.Conn) error { var s string; return CallOnce(a, "screen", nil, &s) },
			"Call":     func(a net.Conn) error { var s string; return NewConn(a).Call("screen", nil, &s) },
		} {
			a, b := net.Pipe()
			go serveReply(b, line(c.n), 64<<10)
			err := call(a)
			a.Close()
			if c.ok && err != nil {
				t.Errorf("%s, a line of %s: %v", via, c.name, err)
			}
			if !c.ok && (err == nil || !strings.Contains(err.Error(), "longer than")) {
				t.Errorf("%s, a line of %s: %v, want it refused as longer than %d bytes", via, c.name, err, MaxLine)
			}
		}
	}
}

// A result that JSON makes longer than MaxLine (here 2 MiB of "<", six bytes each escaped) is
// answered with an error saying what to ask for instead, in a line the peer takes, and the
// connection stays in step for the next request: sent whole, the peer would refuse the line as
// too long and lose its place in the stream.
func TestReplyOverMaxLineAsJSONIsAnErrorThePeerReads(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		defer b.Close()
		c := NewConn(b)
		for _, res := range []any{ScreenResult{HistoryText: strings.Repeat("<", 2<<20)}, "next"} {
			var req Request
			if c.Recv(&req) != nil {
				return
			}
			_ = c.Reply(res, nil)
		}
	}()
	c := NewConn(a)
	var big ScreenResult
	err := c.Call("screen", ScreenArgs{Scrollback: true}, &big)
	var we *Error
	if !errors.As(err, &we) || !strings.Contains(we.Message, "raw bytes") {
		t.Fatalf("a reply of 12 MiB as JSON: %v, want an error reply that says to ask for raw bytes", err)
	}
	var next string
	if err := c.Call("ls", nil, &next); err != nil || next != "next" {
		t.Fatalf("the request after it: %q, %v; want the connection in step", next, err)
	}
}
