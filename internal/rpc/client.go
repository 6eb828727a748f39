package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Client calls the daemon's RPC endpoint. It is safe for concurrent use.
type Client struct {
	endpoint string
	token    string
	http     *http.Client
	// dial, when set, makes Stream's connection itself, so that the stream it returns can
	// half-close (CloseWrite); http.Client's switched body cannot.
	dial func(ctx context.Context) (net.Conn, error)
}

// NewClient returns a client for the daemon at baseURL (e.g. "http://127.0.0.1:8092"). A non-empty
// token is sent as "Authorization: Bearer <token>" (the host listener requires it). A nil
// httpClient means http.DefaultClient; bound calls with the context.
func NewClient(baseURL, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{endpoint: strings.TrimRight(baseURL, "/") + Path, token: token, http: httpClient}
}

// NewUnixClient returns a client for the daemon's endpoint on the AF_UNIX socket at path (a
// session's own socket, /run/allox/session.sock inside its runs). It carries no token: the
// socket that accepts the connection is the caller's identity.
func NewUnixClient(path string) *Client {
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}
	c := NewClient("http://session", "", &http.Client{Transport: tr})
	c.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
	return c
}

// Call runs action with params (nil sends none) and decodes the result into result (nil discards
// it). A reply with "ok": false comes back as an *Error whose Status is the HTTP status; use
// errors.Is(err, rpc.CodeNotFound) or errors.As. Transport and decoding failures are other errors.
func (c *Client) Call(ctx context.Context, action string, params any, result any) error {
	body, err := encodeRequest(action, params)
	if err != nil {
		return fmt.Errorf("rpc %s: %w", action, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("rpc %s: %w", action, err)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("Accept", ContentType)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("rpc %s: %w", action, err)
	}
	defer resp.Body.Close()
	return decodeResponse(resp, action, result)
}

// StreamProtocol is the HTTP Upgrade token a stream action answers with (its byte stream).
const StreamProtocol = "allox-stream"

// Stream runs a stream action (e.g. network.connect on a session socket): when the daemon accepts
// it, the connection switches to a byte stream, returned for the caller to read and write and
// close; when it refuses, the *Error comes back as from Call. ctx bounds only the request, not the
// stream. A stream of a NewUnixClient also has CloseWrite (half-close: the daemon reads EOF and
// can still write).
func (c *Client) Stream(ctx context.Context, action string, params any) (io.ReadWriteCloser, error) {
	body, err := encodeRequest(action, params)
	if err != nil {
		return nil, fmt.Errorf("rpc %s: %w", action, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("rpc %s: %w", action, err)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", StreamProtocol)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.dial != nil {
		return c.streamOwn(ctx, action, req)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rpc %s: %w", action, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if rw, ok := resp.Body.(io.ReadWriteCloser); ok {
			return rw, nil
		}
		resp.Body.Close()
		return nil, fmt.Errorf("rpc %s: BUG: the switched connection is not writable", action)
	}
	defer resp.Body.Close()
	if err := decodeResponse(resp, action, nil); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("rpc %s: the daemon replied HTTP %s without switching to a stream", action, resp.Status)
}

// streamOwn is Stream on a connection of its own (c.dial), written and read without the
// http.Client, so that the switched stream keeps the connection's CloseWrite.
func (c *Client) streamOwn(ctx context.Context, action string, req *http.Request) (io.ReadWriteCloser, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("rpc %s: %w", action, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	br := bufio.NewReader(conn)
	err = req.Write(conn)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() || err != nil {
		conn.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("rpc %s: %w", action, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return &stream{Conn: conn, r: br}, nil
	}
	defer conn.Close()
	defer resp.Body.Close()
	if err := decodeResponse(resp, action, nil); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("rpc %s: the daemon replied HTTP %s without switching to a stream", action, resp.Status)
}

// stream is a switched connection: it reads what was buffered with the response first.
type stream struct {
	net.Conn
	r *bufio.Reader
}

func (s *stream) Read(p []byte) (int, error) { return s.r.Read(p) }

// CloseWrite half-closes the stream: the daemon reads EOF, and the stream can still be read.
func (s *stream) CloseWrite() error {
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("half-close: %w", errors.ErrUnsupported)
}

func encodeRequest(action string, params any) ([]byte, error) {
	req := Request{Action: action}
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("encode params: %w", err)
		}
		req.Params = p
	}
	return json.Marshal(req)
}

func decodeResponse(resp *http.Response, action string, result any) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("rpc %s: read response: %w", action, err)
	}
	if len(data) > MaxResponseBytes {
		return fmt.Errorf("rpc %s: response exceeds %d bytes", action, MaxResponseBytes)
	}
	var r Response
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("rpc %s: HTTP %s: the reply is not an RPC response (%w): %q", action, resp.Status, err, snippet(data))
	}
	if !r.OK {
		if r.Error == nil {
			r.Error = Errorf(CodeInternal, "", "the daemon replied ok=false without an error object (HTTP %s)", resp.Status)
		}
		r.Error.Status = resp.StatusCode
		return r.Error
	}
	if result == nil || len(r.Result) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Result, result); err != nil {
		return fmt.Errorf("rpc %s: decode result: %w", action, err)
	}
	return nil
}

func snippet(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}
