// Package shareproto is the wire protocol of the session-share plugin's actions, shared by the
// daemon side (services/internal/sessionshare) and the client (allox share). It has no
// dependencies beyond the standard library, so that the client links nothing of the daemon.
//
// Every action is called on the session's own socket (/run/allox/session.sock); the daemon binds
// agent_id and session_id to the caller. A target session is named "agent/session" in params
// "target", a path in params "path", relative to the target's shared scope (its current/ or the
// directory of current/ it shared, e.g. "output"). A refusal is the call's ordinary error
// (rpc.Error: forbidden, conflict, invalid_params or not_found, one line naming the target, the
// path and the reason) — for the two stream actions too: they are decided, and the file opened,
// before the connection switches to a stream.
//
// share.read (stream; params ReadParams). After the switch the daemon writes:
//
//	{"size":N}\n            a ReadHeader, one JSON line
//	N bytes                 the file's bytes, exactly N of them
//	{"ok":true,"bytes":N}\n a Result, one JSON line
//
// and closes. The read is complete only when the trailer says ok with bytes == N: a stream that
// ends before it (the daemon cut it: it stopped, the client stalled past the idle timeout, or the
// file could not be read to its end) is a failed read, and the client must discard what it got.
// A trailer with ok false carries the error (its code and message).
//
// share.write (stream; params WriteParams, with "size" the exact byte count, at most the limit
// the daemon states in its refusal). After the switch the client writes exactly size bytes and
// may then half-close its side; the daemon writes one Result line and closes:
//
//	{"ok":true,"bytes":N}\n                         the file is in place (renamed over the old one)
//	{"ok":false,"code":"...","error":"..."}\n       nothing changed in the target
//
// The client must wait for that line: only ok true means the file was written. Sending fewer
// bytes than size (closing early) fails the write and leaves the target unchanged.
package shareproto

// The actions.
const (
	ActionEnable  = "share.enable"
	ActionDisable = "share.disable"
	ActionStatus  = "share.status"
	ActionLs      = "share.ls"
	ActionStat    = "share.stat"
	ActionRead    = "share.read"
	ActionWrite   = "share.write"
)

// Permissions a session grants the others on its scope.
const (
	Read  = "read"
	Write = "write"
)

// EnableParams are share.enable's params: Scope is a directory of current/ ("" for all of
// current/, e.g. "output"), Permission Read (the default) or Write.
type EnableParams struct {
	Scope      string `json:"scope,omitempty"`
	Permission string `json:"permission,omitempty"`
}

// State is a session's share state: share.enable's, share.disable's and share.status's reply.
// Peers (share.status only, when enabled) are the other sessions that share, as "agent/session".
type State struct {
	Enabled    bool   `json:"enabled"`
	Scope      string `json:"scope"`
	Permission string `json:"permission,omitempty"`
	Peers      []Peer `json:"peers,omitempty"`
	MaxRead    int64  `json:"max_read_bytes,omitempty"`
	MaxWrite   int64  `json:"max_write_bytes,omitempty"`
}

// Peer is another session that shares.
type Peer struct {
	Target     string `json:"target"` // "agent/session"
	Scope      string `json:"scope"`
	Permission string `json:"permission"`
}

// PathParams are share.ls's, share.stat's and share.read's params. Path "" (or ".") is the
// scope's root, for ls and stat.
type PathParams struct {
	Target string `json:"target"`
	Path   string `json:"path,omitempty"`
}

// WriteParams are share.write's params.
type WriteParams struct {
	Target string `json:"target"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
}

// Entry is one file of share.ls's reply, or share.stat's reply. Type is "file", "dir",
// "symlink" or "other" (FIFO, socket, device).
type Entry struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode"` // permission bits, octal, e.g. "0644"
	MTime  int64  `json:"mtime_unix_ns"`
	Links  uint64 `json:"links,omitempty"`   // stat only
	LinkTo string `json:"link_to,omitempty"` // a symlink's target, ls only: share follows none
}

// Listing is share.ls's reply: at most MaxEntries entries sorted by name, Truncated when the
// directory has more.
type Listing struct {
	Target    string  `json:"target"`
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated,omitempty"`
}

// MaxEntries bounds a Listing.
const MaxEntries = 10000

// ReadHeader opens a share.read stream.
type ReadHeader struct {
	Size int64 `json:"size"`
}

// Result ends a share.read stream and is the one line a share.write stream answers with.
type Result struct {
	OK    bool   `json:"ok"`
	Bytes int64  `json:"bytes"`
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}
