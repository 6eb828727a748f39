package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
	"golang.org/x/net/http/httpguts"
)

// endpoint serves POST /v1/rpc on one listener.
type endpoint struct {
	router *Router
	origin Origin
	caller *SessionRef // the session of a session socket, else nil
	auth   *bearer     // nil on the loopback listener
	log    *slog.Logger
}

// NewHandler returns the HTTP handler of one listener. A non-empty token makes every request need
// "Authorization: Bearer <token>"; Host listeners must have one.
func NewHandler(router *Router, origin Origin, token string, log *slog.Logger) http.Handler {
	e := &endpoint{router: router, origin: origin, log: log}
	if token != "" {
		e.auth = newBearer(token)
	}
	if origin == Host && e.auth == nil {
		panic("BUG: host listener without a token")
	}
	return e
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	c := &Call{Origin: e.origin, Caller: e.caller, Upgrade: wantsStream(r)}
	if e.origin == Session {
		c.PeerPID = peerPID(r.Context())
	}
	result, err := e.handle(w, r, c)
	if relay, ok := result.(plugin.Relay); ok && err == nil {
		e.stream(w, r, c, relay, start)
		return
	}
	status, rerr := writeResponse(w, result, err)
	level, attrs := slog.LevelInfo, []slog.Attr{
		slog.String("action", c.Action), slog.String("origin", e.origin.String()),
		slog.Int("status", status), slog.Duration("elapsed", time.Since(start)),
	}
	if e.caller != nil {
		attrs = append(attrs, slog.String("agent_id", e.caller.AgentID), slog.String("session_id", e.caller.SessionID))
	}
	if rerr != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("code", string(rerr.Code)), slog.String("error", rerr.Message))
	}
	e.log.LogAttrs(r.Context(), level, "rpc call", attrs...)
	if rerr != nil {
		return
	}
	for _, f := range c.Afters() {
		if err := f(); err != nil {
			e.log.LogAttrs(r.Context(), slog.LevelError, "after-response effect failed",
				slog.String("action", c.Action), slog.String("error", err.Error()))
		}
	}
}

// handle checks the request in order (authentication first, so that an unauthenticated client learns
// nothing), decodes it and dispatches it.
func (e *endpoint) handle(w http.ResponseWriter, r *http.Request, c *Call) (any, error) {
	if e.auth != nil && !e.auth.allows(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="allox"`)
		return nil, rpc.Errorf(rpc.CodeUnauthorized, "Authorization",
			"missing or wrong bearer token: send \"Authorization: Bearer <token>\" with the token the host passed to the guest")
	}
	if r.URL.Path != rpc.Path {
		return nil, rpc.Errorf(rpc.CodeNotFound, "", "no endpoint at %s: POST requests to %s", r.URL.Path, rpc.Path)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, rpc.Errorf(rpc.CodeMethodNotAllowed, "", "%s is not allowed: POST the request to %s", r.Method, rpc.Path)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != rpc.ContentType {
		return nil, rpc.Errorf(rpc.CodeUnsupportedMediaType, "Content-Type",
			"Content-Type is %q: send the JSON body with \"Content-Type: application/json\"", r.Header.Get("Content-Type"))
	}
	req, err := rpc.DecodeRequest(http.MaxBytesReader(w, r.Body, rpc.MaxRequestBytes))
	if err != nil {
		return nil, err
	}
	c.Action, c.Params = req.Action, req.Params
	return e.router.Dispatch(r.Context(), c)
}

// writeResponse writes the reply and flushes it. It returns the HTTP status and, for a failed call,
// the wire error.
func writeResponse(w http.ResponseWriter, result any, err error) (int, *rpc.Error) {
	resp := rpc.Response{OK: err == nil}
	if err == nil {
		resp.Result, err = json.Marshal(result)
		if string(resp.Result) == "null" {
			resp.Result = json.RawMessage("{}")
		}
	}
	if err != nil {
		resp = rpc.Response{Error: rpcError(err)}
	}
	body, merr := json.Marshal(resp)
	if merr != nil {
		panic("BUG: cannot encode an RPC response: " + merr.Error())
	}
	status := http.StatusOK
	if resp.Error != nil {
		status = resp.Error.Code.HTTPStatus()
	}
	h := w.Header()
	h.Set("Content-Type", rpc.ContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
	http.NewResponseController(w).Flush()
	return status, resp.Error
}

// wantsStream reports whether the request asks to switch to a Stream action's byte stream.
func wantsStream(r *http.Request) bool {
	return httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") &&
		httpguts.HeaderValuesContainsToken(r.Header["Upgrade"], plugin.StreamProtocol)
}

// stream switches the connection to a byte stream (101 Switching Protocols) and hands it to the
// action's relay, without the listener's read and write deadlines.
func (e *endpoint) stream(w http.ResponseWriter, r *http.Request, c *Call, relay plugin.Relay, start time.Time) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		e.log.LogAttrs(r.Context(), slog.LevelError, "stream: hijack failed", slog.String("action", c.Action), slog.String("error", err.Error()))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	_, err = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + plugin.StreamProtocol + "\r\n\r\n")
	if err == nil {
		err = buf.Flush()
	}
	if err == nil {
		err = relay(&hijacked{Conn: conn, r: buf.Reader})
	} else {
		conn.Close()
	}
	level, attrs := slog.LevelInfo, []slog.Attr{slog.String("action", c.Action), slog.String("origin", e.origin.String()),
		slog.Int("status", http.StatusSwitchingProtocols), slog.Duration("elapsed", time.Since(start))}
	if err != nil {
		level, attrs = slog.LevelWarn, append(attrs, slog.String("error", err.Error()))
	}
	e.log.LogAttrs(r.Context(), level, "rpc stream", attrs...)
}

// hijacked reads what the server had already buffered before the connection itself.
type hijacked struct {
	net.Conn
	r io.Reader
}

func (h *hijacked) Read(p []byte) (int, error) { return h.r.Read(p) }

// CloseWrite half-closes the stream toward the client (a relay's end of one direction), where the
// connection can (a session socket's and TCP's can).
func (h *hijacked) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("half-close: %w", errors.ErrUnsupported)
}
