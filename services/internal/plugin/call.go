package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"

	"github.com/allox-os/allox/internal/rpc"
)

// Origin says which listener a call arrived on.
type Origin int

const (
	// Loopback is the unauthenticated listener inside the guest (--listen).
	Loopback Origin = iota
	// Host is the host-facing listener; every call on it carried the bearer token (--listen-host).
	Host
	// Session is one session's own socket (/run/allox/session.sock in its runs): the caller is
	// that session, known from the socket that accepted the connection (Call.Caller).
	Session
)

func (o Origin) String() string {
	switch o {
	case Host:
		return "host"
	case Session:
		return "session"
	}
	return "loopback"
}

// Scope is the set of listeners an action is served on.
type Scope uint8

const (
	// ScopeLoopback serves the action on the guest's control listener (--listen).
	ScopeLoopback Scope = 1 << iota
	// ScopeHost serves it on the host listener (--listen-host, bearer token).
	ScopeHost
	// ScopeSession serves it on every session's own socket, always about the caller's session.
	ScopeSession

	// ScopeControl is the default (the zero Scope): both control listeners, no session socket.
	ScopeControl = ScopeLoopback | ScopeHost
)

// Serves reports whether an action of this scope is served on the listener o.
func (s Scope) Serves(o Origin) bool {
	if s == 0 {
		s = ScopeControl
	}
	switch o {
	case Host:
		return s&ScopeHost != 0
	case Session:
		return s&ScopeSession != 0
	}
	return s&ScopeLoopback != 0
}

// SessionRef names a session.
type SessionRef struct {
	AgentID, SessionID string
}

// Hash names what the daemon and its plugins keep per session outside every workspace (its
// socket, its namespace, its state files): 32 hex digits of a sha256 of the ids, so that any ids
// fit a file name and an AF_UNIX path.
func (r SessionRef) Hash() string {
	sum := sha256.Sum256([]byte(r.AgentID + "\x00" + r.SessionID))
	return hex.EncodeToString(sum[:16])
}

// Call is one decoded request as a handler sees it.
type Call struct {
	Action string
	// Params is the params object ("{}" when the client sent none); decode it with rpc.DecodeParams.
	Params json.RawMessage
	Origin Origin
	// Caller is the session whose socket the call arrived on (Origin Session only, else nil).
	Caller *SessionRef
	// PeerPID is the process that connected to the session socket (SO_PEERCRED, in the daemon's
	// pid namespace; 0 when unknown or on another listener): Workspace.RunOfPID names its run.
	PeerPID int
	// Upgrade says the client asked for a byte stream (HTTP "Upgrade: allox-stream"), which a
	// Stream action's Relay then takes over.
	Upgrade bool

	after []func() error
}

// StreamProtocol is the HTTP Upgrade token of a Stream action's byte stream.
const StreamProtocol = rpc.StreamProtocol

// Relay takes over the connection of a Stream action once the daemon has switched it to a byte
// stream (HTTP 101): it relays until either side is done and closes conn.
type Relay func(conn io.ReadWriteCloser) error

// AfterResponse runs f once the successful reply has been written and flushed to the client (for
// effects such as power-off that would otherwise cut the reply short). It is not run when the call
// fails; an error from f is logged, since the client already has its reply.
func (c *Call) AfterResponse(f func() error) { c.after = append(c.after, f) }

// Afters are the functions AfterResponse registered, in order (for the listener that replies).
func (c *Call) Afters() []func() error { return c.after }

// Handler serves one action: guard, validate params, call the domain, return its result (encoded as
// JSON) or its error (mapped by rpcError).
type Handler func(ctx context.Context, c *Call) (any, error)

// Action is a registered action.
type Action struct {
	Handler Handler
	// Scope says where the action is served (zero: ScopeControl). Elsewhere it is refused with
	// rpc.CodeForbidden: processes in the guest (agents among them) must not reach host-only
	// actions, and a session socket serves only what is about its own session.
	Scope Scope
	// ReadOnly actions change nothing and are not audited; every other call (refused ones too) is
	// one line of the audit log (see Router.SetAudit).
	ReadOnly bool
	// Stream actions answer with a byte stream: the Handler decides (an error is an ordinary
	// reply) and returns a Relay, which gets the connection after the switch. The client must ask
	// for the stream (Call.Upgrade); a call that does not is refused naming the header.
	Stream bool
}

// Where says, for a refusal, where an action of this scope is served.
func (s Scope) Where() string {
	if s == 0 {
		s = ScopeControl
	}
	switch {
	case s == ScopeHost:
		return "it is accepted only on the host listener (--listen-host) with its bearer token"
	case s == ScopeSession:
		return "it is accepted only on a session's own socket, /run/allox/session.sock inside the session's runs"
	case s&ScopeSession == 0:
		return "it is accepted on the daemon's control listeners, not on a session socket"
	}
	return "it is accepted on the daemon's control listeners and on session sockets"
}
