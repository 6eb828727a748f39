// Package wire is Kuruwa's protocol between the CLI, the main daemon and the instance daemons:
// newline-delimited JSON over a Unix stream socket. A client sends one Request and reads one
// Response; streaming operations (tail, attach, wait) then exchange Frames on the same connection
// until either side closes it. A Response may be followed by Raw bytes sent as they are: a large
// text result (a full scrollback) that JSON would escape on one side and scan twice on the other.
package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Request is one operation.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers a Request: Error is set, or Result is. Raw is the number of bytes that follow
// the line, unencoded, for a result that is a RawReceiver (ReplyRaw).
type Response struct {
	Error  *Error          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Raw    int             `json:"raw,omitempty"`
}

// RawReceiver is a result that takes the bytes its reply sent after the line.
type RawReceiver interface{ ReceiveRaw(raw []byte) }

// Frame is one message of a stream. Output carries terminal bytes at offset Seq; Input and Size
// go from an attached client to the terminal; End ends a stream, with the program's status in Exit once
// it exited; Error ends it with a reason.
type Frame struct {
	Seq    uint64  `json:"seq,omitempty"`
	Output []byte  `json:"output,omitempty"`
	Input  []byte  `json:"input,omitempty"`
	Size   *[2]int `json:"size,omitempty"`
	Exit   *int    `json:"exit,omitempty"`
	Next   uint64  `json:"next,omitempty"`
	End    bool    `json:"end,omitempty"`
	Error  *Error  `json:"error,omitempty"`
}

// Codes of Error.
const (
	CodeBadRequest = "bad_request" // the request is malformed or names a bad value
	CodeNotFound   = "not_found"   // no such object visible to this tenant
	CodeForbidden  = "forbidden"   // the object is visible but the operation is not granted
	CodeConflict   = "conflict"    // the object's state forbids it (name taken, instance not empty)
	CodeGone       = "gone"        // the object existed but is no longer valid
	CodeRevoked    = "revoked"     // a grant this stream relied on was revoked
	CodeInternal   = "internal"
)

// Error is a failed request: a stable code, a message saying what to do, the offending field.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (%s): %s", e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is matches errors by code, so errors.Is(err, &wire.Error{Code: wire.CodeForbidden}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf builds an Error.
func Errorf(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// Stream is what a Conn runs on: a net.Conn in the daemons, an *os.File of a socket in the CLI
// (which so links no net package).
type Stream interface {
	io.ReadWriteCloser
	SetDeadline(time.Time) error
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// Conn is a protocol connection.
type Conn struct {
	Stream
	r   *bufio.Reader
	enc *json.Encoder
}

// NewConn wraps c.
func NewConn(c Stream) *Conn {
	return &Conn{Stream: c, r: bufio.NewReaderSize(c, 16<<10), enc: json.NewEncoder(c)}
}

// Buffered is how many bytes were read from the peer and not yet taken as a message.
func (c *Conn) Buffered() int { return c.r.Buffered() }

// MaxLine bounds one message, so a client cannot make the daemon buffer without limit.
const MaxLine = 8 << 20

// Send writes one message.
func (c *Conn) Send(v any) error { return c.enc.Encode(v) }

// Recv reads one message into v.
func (c *Conn) Recv(v any) error {
	line, err := c.readLine()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(line, v); err != nil {
		return Errorf(CodeBadRequest, "", "message is not valid JSON: %v", err)
	}
	return nil
}

// readLine reads one message, its newline included.
func (c *Conn) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return nil, fmt.Errorf("message longer than %d bytes", MaxLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return line, nil
	}
}

// Call sends op with args and decodes the result into out (which may be nil).
func (c *Conn) Call(op string, args, out any) error {
	req, err := EncodeRequest(op, args)
	if err != nil {
		return err
	}
	if _, err := c.Stream.Write(req); err != nil {
		return fmt.Errorf("send %s: %w", op, err)
	}
	var resp Response
	if err := c.Recv(&resp); err != nil {
		return fmt.Errorf("%s: reading the reply: %w", op, err)
	}
	// Read whatever follows the line even when out does not want it, so that the connection
	// stays in step for the next call.
	raw, err := readRaw(c.r, resp.Raw)
	if err != nil {
		return fmt.Errorf("%s: reading the reply: %w", op, err)
	}
	if err := resp.result(op, out); err != nil {
		return err
	}
	giveRaw(out, raw)
	return nil
}

// checkRaw refuses a Raw length a peer cannot honestly have sent.
func checkRaw(n int) error {
	if n < 0 || n > MaxLine {
		return Errorf(CodeBadRequest, "raw", "a reply announces %d raw bytes; at most %d may follow a message", n, MaxLine)
	}
	return nil
}

// readRaw reads from r the n bytes that follow a message.
func readRaw(r io.Reader, n int) ([]byte, error) {
	if err := checkRaw(n); err != nil || n == 0 {
		return nil, err
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("%d raw bytes announced: %w", n, err)
	}
	return raw, nil
}

// giveRaw gives raw, if there is any, to out if out takes raw bytes; a caller that asked for no
// result (out nil) drops them.
func giveRaw(out any, raw []byte) {
	if r, ok := out.(RawReceiver); ok && raw != nil {
		r.ReceiveRaw(raw)
	}
}

// CallRaw sends op with args and returns the reply as the peer sent it (its line, newline
// included, and the raw bytes after it), for a relay that passes a large result on without
// decoding and re-encoding it. Only the line, which holds no large text, is decoded: to check it
// and to learn how many raw bytes follow.
func (c *Conn) CallRaw(op string, args any) ([]byte, error) {
	req, err := EncodeRequest(op, args)
	if err != nil {
		return nil, err
	}
	if _, err := c.Stream.Write(req); err != nil {
		return nil, fmt.Errorf("send %s: %w", op, err)
	}
	line, err := c.readLine()
	if err != nil {
		return nil, fmt.Errorf("%s: reading the reply: %w", op, err)
	}
	var h struct {
		Raw int `json:"raw"`
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("%s: reading the reply: %w", op, Errorf(CodeBadRequest, "", "message is not valid JSON: %v", err))
	}
	raw, err := readRaw(c.r, h.Raw)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the reply: %w", op, err)
	}
	return append(line, raw...), nil
}

// SendLine writes a message that is already encoded, such as a line CallRaw returned.
func (c *Conn) SendLine(line []byte) error {
	_, err := c.Stream.Write(line)
	return err
}

// CallOnce is Call on a connection that carries this one request: it reads no further than the
// reply (its line and the raw bytes the line announces) and buffers nothing beyond it.
func CallOnce(rw io.ReadWriter, op string, args, out any) error {
	req, err := EncodeRequest(op, args)
	if err != nil {
		return err
	}
	if _, err := rw.Write(req); err != nil {
		return fmt.Errorf("send %s: %w", op, err)
	}
	buf := make([]byte, 0, 16<<10)
	var rest []byte // read past the newline: the start of the raw bytes
	for start := 0; ; {
		if len(buf) == cap(buf) {
			// Grown to one byte past MaxLine at most: enough to tell a line that is too long.
			buf = append(buf, make([]byte, min(len(buf), MaxLine+1-len(buf)))...)[:len(buf)]
		}
		n, err := rw.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		i := bytes.IndexByte(buf[start:], '\n')
		if i >= 0 && start+i+1 <= MaxLine {
			buf, rest = buf[:start+i+1], buf[start+i+1:]
			break
		}
		if i >= 0 || len(buf) > MaxLine {
			return fmt.Errorf("%s: reading the reply: message longer than %d bytes", op, MaxLine)
		}
		start = len(buf)
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%s: reading the reply: %w", op, err)
		}
	}
	// One pass: the result decodes straight into out, not into a RawMessage decoded again.
	var resp struct {
		Error  *Error `json:"error,omitempty"`
		Result any    `json:"result,omitempty"`
		Raw    int    `json:"raw,omitempty"`
	}
	if out != nil {
		resp.Result = out
	}
	if err := json.Unmarshal(buf, &resp); err != nil {
		if _, ok := err.(*json.SyntaxError); ok {
			return fmt.Errorf("%s: reading the reply: %w", op, Errorf(CodeBadRequest, "", "message is not valid JSON: %v", err))
		}
		return fmt.Errorf("decode %s result: %w", op, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if err := checkRaw(resp.Raw); err != nil {
		return fmt.Errorf("%s: reading the reply: %w", op, err)
	}
	if len(rest) > resp.Raw {
		return fmt.Errorf("%s: reading the reply: %w", op, Errorf(CodeBadRequest, "raw", "%d bytes follow a reply that announces %d", len(rest), resp.Raw))
	}
	raw, err := readRaw(io.MultiReader(bytes.NewReader(rest), rw), resp.Raw)
	if err != nil {
		return fmt.Errorf("%s: reading the reply: %w", op, err)
	}
	giveRaw(out, raw)
	return nil
}

// EncodeRequest is the line that asks for op with args (nil for none): Request spelt out, so
// that only args go through the encoder.
func EncodeRequest(op string, args any) ([]byte, error) {
	q, err := json.Marshal(op)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", op, err)
	}
	line := append(append(make([]byte, 0, 128), `{"op":`...), q...)
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", op, err)
		}
		line = append(append(line, `,"args":`...), b...)
	}
	return append(line, "}\n"...), nil
}

func (resp *Response) result(op string, out any) error {
	if resp.Error != nil {
		return resp.Error
	}
	if out != nil && resp.Result != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("decode %s result: %w", op, err)
		}
	}
	return nil
}

// Reply sends a Response with result or err.
func (c *Conn) Reply(result any, err error) error {
	if err != nil {
		we, ok := err.(*Error)
		if !ok {
			we = &Error{Code: CodeInternal, Message: err.Error()}
		}
		return c.Send(Response{Error: we})
	}
	b, merr := json.Marshal(result)
	if merr != nil {
		return c.Send(Response{Error: &Error{Code: CodeInternal, Message: merr.Error()}})
	}
	// A line its peer would refuse is never sent: the peer would lose step with the connection
	// and say only that a message was too long.
	if len(b)+len(`{"result":}`)+1 > MaxLine {
		return c.Reply(nil, Errorf(CodeInternal, "", "the reply is %d bytes as JSON, more than the %d one message carries; ask for less (a full scrollback as raw bytes, as kuruwa screen --scrollback does, or through kuruwa transcript)", len(b), MaxLine))
	}
	// Response{Result: b} spelt out, so that a large result is not scanned again by the encoder.
	line := make([]byte, 0, len(b)+len(`{"result":}`)+1)
	line = append(append(append(line, `{"result":`...), b...), "}\n"...)
	return c.SendLine(line)
}

// ReplyRaw sends a Response with result, and raw after its line as it is (one write), for a
// result that is a RawReceiver: its peer gives raw to the result it decodes.
func (c *Conn) ReplyRaw(result any, raw []byte) error {
	if len(raw) > MaxLine {
		return c.Reply(nil, Errorf(CodeInternal, "", "the history is %d bytes, more than the %d one reply carries; read it with kuruwa transcript instead", len(raw), MaxLine))
	}
	b, err := json.Marshal(result)
	if err != nil {
		return c.Reply(nil, err)
	}
	msg := make([]byte, 0, len(b)+len(raw)+48)
	msg = append(append(msg, `{"result":`...), b...)
	msg = strconv.AppendInt(append(msg, `,"raw":`...), int64(len(raw)), 10)
	return c.SendLine(append(append(msg, "}\n"...), raw...))
}

// Decode decodes a request's arguments, refusing unknown fields so a misspelt argument is an
// error rather than silently ignored.
func Decode[T any](raw json.RawMessage) (T, error) {
	var v T
	if len(raw) == 0 {
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, Errorf(CodeBadRequest, "args", "%v", err)
	}
	return v, nil
}
