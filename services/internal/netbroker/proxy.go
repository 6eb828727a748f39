package netbroker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DeniedHeader carries the rule that denied a request in the proxy's 403 response.
const DeniedHeader = "X-Allox-Denied-By"

var errServerClosed = http.ErrServerClosed

// session is one session's proxy and connection budget. Nothing on its data path is shared
// with another session: its own server, transport (connection pool) and slots.
type session struct {
	b             *Broker
	agent, id     string
	slots         slots
	srv           *http.Server
	tr            *http.Transport
	rp            *httputil.ReverseProxy
	serving       atomic.Bool
	mu            sync.Mutex
	tunnels       map[io.Closer]struct{} // hijacked CONNECT conns and connect relays
	closed        bool
	active        sync.WaitGroup // handlers and tunnels; Add only under mu while !closed
	closeSessOnce sync.Once
}

func newSession(b *Broker, agent, id string) *session {
	s := &session{b: b, agent: agent, id: id, slots: make(slots, b.limits.MaxConns), tunnels: map[io.Closer]struct{}{}}
	s.tr = &http.Transport{
		Proxy:                 nil,
		DialContext:           s.dialForRequest,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: b.limits.IdleTimeout,
		DisableCompression:    true,
		ReadBufferSize:        64 << 10,
		WriteBufferSize:       64 << 10,
	}
	s.rp = &httputil.ReverseProxy{
		Rewrite:       func(*httputil.ProxyRequest) {}, // Out is the absolute-URI request, hop-by-hop headers removed
		Transport:     s.tr,
		FlushInterval: 50 * time.Millisecond,
		ErrorHandler:  s.proxyError,
		BufferPool:    bufferPool{},
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: b.limits.IdleTimeout,
		IdleTimeout:       b.limits.IdleTimeout,
		ErrorLog:          log.New(io.Discard, "", 0), // the library does not log; refusals are audited
	}
	return s
}

func (s *session) close() {
	s.closeSessOnce.Do(func() {
		s.srv.Close()
		s.tr.CloseIdleConnections()
		s.mu.Lock()
		s.closed = true
		ts := s.tunnels
		s.tunnels = nil
		s.mu.Unlock()
		for c := range ts {
			c.Close()
		}
		s.active.Wait() // every record is written when close returns
	})
}

// enter counts a handler or tunnel that close waits for; false when the session is closed.
func (s *session) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active.Add(1)
	return true
}

// track registers c to be closed with the session; false when the session is already closed.
func (s *session) track(cs ...io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	for _, c := range cs {
		s.tunnels[c] = struct{}{}
	}
	return true
}

func (s *session) untrack(cs ...io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		delete(s.tunnels, c)
	}
}

func (s *session) newRecord(kind, method, host string, port uint16) Record {
	return Record{Time: time.Now().UTC(), AgentID: s.agent, SessionID: s.id, Kind: kind, Method: method, Host: host, Port: port}
}

func (s *session) finish(r *Record, start time.Time) {
	r.DurationNS = time.Since(start).Nanoseconds()
	s.b.record(*r)
}

// refuse answers the client with status and a one-line reason, and records it.
func (s *session) refuse(w http.ResponseWriter, r *Record, start time.Time, status int, decision, reason string) {
	r.Decision, r.Status, r.Error = decision, status, reason
	if decision == Denied {
		w.Header().Set(DeniedHeader, r.Rule)
	}
	http.Error(w, reason, status)
	s.finish(r, start)
}

func (s *session) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !s.enter() {
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.active.Done()
	if req.Method == http.MethodConnect {
		s.serveCONNECT(w, req)
		return
	}
	s.serveForward(w, req)
}

// admit takes a slot and resolves the destination; on refusal it has answered the client.
func (s *session) admit(ctx context.Context, w http.ResponseWriter, rec *Record, start time.Time) (target, bool) {
	if !s.slots.take() {
		s.refuse(w, rec, start, http.StatusServiceUnavailable, Limited, ErrLimit.Error())
		return target{}, false
	}
	t, err := s.b.resolve(ctx, s.agent, s.id, rec.Host, rec.Port)
	rec.Rule = t.dec.Rule
	var de *DeniedError
	switch {
	case errors.As(err, &de):
		s.slots.give()
		s.refuse(w, rec, start, http.StatusForbidden, Denied, err.Error()+"\n")
		return t, false
	case err != nil:
		s.slots.give()
		s.refuse(w, rec, start, http.StatusBadGateway, Failed, err.Error())
		return t, false
	}
	rec.Decision = Allowed
	return t, true
}

func (s *session) serveCONNECT(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	host, port, err := splitHostPort(req.Host, "")
	rec := s.newRecord(KindCONNECT, http.MethodConnect, host, port)
	if err != nil {
		s.refuse(w, &rec, start, http.StatusBadRequest, Failed, "CONNECT "+req.Host+": "+err.Error())
		return
	}
	t, ok := s.admit(req.Context(), w, &rec, start)
	if !ok {
		return
	}
	defer s.slots.give()
	dst, addr, err := s.b.dial(req.Context(), t)
	if err != nil {
		s.refuse(w, &rec, start, http.StatusBadGateway, Failed, err.Error())
		return
	}
	rec.Address = addr.String()
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		dst.Close()
		s.refuse(w, &rec, start, http.StatusInternalServerError, Failed, "hijack: "+err.Error())
		return
	}
	rec.Status = http.StatusOK
	if !s.track(client, dst) {
		client.Close()
		dst.Close()
		rec.Decision, rec.Error = Failed, "the session was closed"
		s.finish(&rec, start)
		return
	}
	defer s.untrack(client, dst)
	client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		dst.Close()
		rec.Error = err.Error()
		s.finish(&rec, start)
		return
	}
	rec.BytesUp, rec.BytesDown = relay(bufferedConn{client, brw.Reader}, dst, s.b.limits.IdleTimeout)
	s.finish(&rec, start)
}

// bufferedConn reads what the server already buffered before the rest of the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// exchange is what one forwarded request learns on its way: the targets the policy allowed
// (for the transport's dial), the address it reached, and the error the reverse proxy met.
type exchange struct {
	t    target
	addr atomic.Pointer[string]
	err  error
}

type exchangeKey struct{}

func (s *session) serveForward(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	rec := s.newRecord(KindHTTP, req.Method, req.URL.Hostname(), 0)
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		s.refuse(w, &rec, start, http.StatusBadRequest, Failed,
			"this is a proxy: send absolute-URI http:// requests, and CONNECT host:port for https")
		return
	}
	_, port, err := splitHostPort(req.URL.Host, "80")
	rec.Port = port
	if err != nil {
		s.refuse(w, &rec, start, http.StatusBadRequest, Failed, err.Error())
		return
	}
	t, ok := s.admit(req.Context(), w, &rec, start)
	if !ok {
		return
	}
	defer s.slots.give()
	ex := &exchange{t: t}
	ctx := context.WithValue(req.Context(), exchangeKey{}, ex)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		a := ci.Conn.RemoteAddr().String()
		ex.addr.Store(&a)
	}})
	out := req.WithContext(ctx)
	body := &countingBody{ReadCloser: req.Body}
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = body
	}
	cw := &countingWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: s.b.limits.IdleTimeout}
	s.rp.ServeHTTP(cw, out)
	cw.rc.Flush()
	cw.rc.SetWriteDeadline(time.Time{}) // the connection's next request starts without one
	if a := ex.addr.Load(); a != nil {
		if h, _, err := net.SplitHostPort(*a); err == nil {
			rec.Address = h
		}
	}
	rec.Status, rec.BytesUp, rec.BytesDown = cw.status, body.n, cw.n
	if ex.err != nil {
		rec.Decision, rec.Error = Failed, ex.err.Error()
	}
	s.finish(&rec, start)
}

// dialForRequest is the transport's dial: it dials the addresses the policy allowed for the
// request, never resolving the name again.
func (s *session) dialForRequest(ctx context.Context, _, _ string) (net.Conn, error) {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	if ex == nil {
		return nil, errors.New("BUG: netbroker: a proxy dial without its checked destination")
	}
	c, _, err := s.b.dial(ctx, ex.t)
	if err != nil {
		return nil, err
	}
	return &idleConn{Conn: c, idle: s.b.limits.IdleTimeout}, nil
}

func (s *session) proxyError(w http.ResponseWriter, req *http.Request, err error) {
	if ex, _ := req.Context().Value(exchangeKey{}).(*exchange); ex != nil {
		ex.err = err
	}
	status := http.StatusBadGateway
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		status = http.StatusGatewayTimeout
	}
	http.Error(w, err.Error(), status)
}

// bufferPool lends the reverse proxy 256 KiB buffers: fewer, larger copies for downloads.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { return new([256 << 10]byte) }}

func (bufferPool) Get() []byte  { return buffers.Get().(*[256 << 10]byte)[:] }
func (bufferPool) Put(b []byte) { buffers.Put((*[256 << 10]byte)(b)) }

// countingWriter counts the response body and gives every write IdleTimeout to reach a client
// that has stopped reading.
type countingWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController
	idle   time.Duration
	dl     deadline
	n      int64
	status int
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 && code >= 200 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.dl.extend(c.rc.SetWriteDeadline, c.idle)
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// splitHostPort splits "host:port" (port defaulting to def when empty and def is set).
func splitHostPort(hostport, def string) (string, uint16, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if def == "" {
			return hostport, 0, fmt.Errorf("%q: write host:port", hostport)
		}
		host, p = hostport, def
	}
	if p == "" {
		p = def
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || host == "" {
		return host, 0, fmt.Errorf("%q: write host:port with a port from 1 to 65535", hostport)
	}
	return host, uint16(n), nil
}

func clip(s string) string {
	if len(s) <= 512 {
		return s
	}
	return s[:512] + "…"
}
