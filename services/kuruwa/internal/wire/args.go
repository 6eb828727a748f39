package wire

import "time"

// Arguments and results of the operations. The main daemon addresses terminals by name; the
// instance daemons by the terminal id the main daemon assigned.

// StartArgs creates a terminal in an instance.
type StartArgs struct {
	Instance string   `json:"instance"`
	Name     string   `json:"name"`
	ID       string   `json:"id,omitempty"` // set by the main daemon for the instance daemon
	Argv     []string `json:"argv,omitempty"`
	Dir      string   `json:"dir,omitempty"`
	Env      []string `json:"env,omitempty"`
	Cols     int      `json:"cols,omitempty"`
	Rows     int      `json:"rows,omitempty"`
}

// TermArgs names a terminal.
type TermArgs struct {
	Name string `json:"name"`
	ID   string `json:"id,omitempty"`
}

// SendArgs is input: Text first (as one bracketed paste when it spans lines and the program
// enabled bracketed paste), then each of Keys as its own write after Settle milliseconds.
type SendArgs struct {
	Name     string   `json:"name"`
	ID       string   `json:"id,omitempty"`
	Text     string   `json:"text,omitempty"`
	Keys     []string `json:"keys,omitempty"`
	SettleMS int      `json:"settle_ms,omitempty"`
}

// A send types at most MaxSendKeys keys and settles at most MaxSendSettle in all (its settle
// delay times the pauses between its writes), so that it holds its terminal for a bounded time:
// the main daemon and the instance daemons refuse a longer one before writing any of it.
const (
	MaxSendKeys   = 256
	MaxSendSettle = 30 * time.Second
)

// ResizeArgs changes a terminal's size.
type ResizeArgs struct {
	Name string `json:"name"`
	ID   string `json:"id,omitempty"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// SignalArgs is cancel: a signal to the terminal's process group.
type SignalArgs struct {
	Name   string `json:"name"`
	ID     string `json:"id,omitempty"`
	Signal string `json:"signal,omitempty"`
}

// TailArgs reads output from offset From; Follow keeps streaming until exit.
type TailArgs struct {
	Name   string `json:"name"`
	ID     string `json:"id,omitempty"`
	From   uint64 `json:"from"`
	Follow bool   `json:"follow,omitempty"`
}

// CleanArgs removes a terminal, or an instance when Instance is set.
type CleanArgs struct {
	Name     string `json:"name,omitempty"`
	ID       string `json:"id,omitempty"`
	Instance string `json:"instance,omitempty"`
	Force    bool   `json:"force,omitempty"`
}

// ScreenArgs asks for the viewport, or the whole history with Scrollback. Raw says the client
// takes the history as raw bytes after the reply's line (ScreenResult.ReceiveRaw); a client that
// does not say so gets it in the result's history_text, so that none receives a history it
// cannot see.
type ScreenArgs struct {
	Name       string `json:"name"`
	ID         string `json:"id,omitempty"`
	Scrollback bool   `json:"scrollback,omitempty"`
	Raw        bool   `json:"raw,omitempty"`
}

// Snapshot is a terminal's viewport as text, with the cursor, the alternate-screen flag and
// whether the program enabled bracketed paste.
type Snapshot struct {
	Lines     []string `json:"lines"`
	CursorRow int      `json:"cursor_row"`
	CursorCol int      `json:"cursor_col"`
	Alt       bool     `json:"alt"`
	Cols      int      `json:"cols"`
	Rows      int      `json:"rows"`
	Bracketed bool     `json:"bracketed_paste"`
}

// ScreenResult is a screen. With scrollback, HistoryText is the history and the viewport, its
// lines joined by newlines, which the daemons send after the reply's line as it is (ReceiveRaw
// takes it): neither escaped nor scanned as JSON. History is that text split into lines, as
// `kuruwa screen --scrollback --json` prints it.
type ScreenResult struct {
	Snapshot
	HistoryText string   `json:"history_text,omitempty"`
	History     []string `json:"history,omitempty"`
}

// ReceiveRaw takes the history, which a reply sends after its line (wire.Conn.ReplyRaw).
func (r *ScreenResult) ReceiveRaw(raw []byte) { r.HistoryText = string(raw) }

// Status is whether a terminal's program runs, and its exit status once it exited.
type Status struct {
	Running  bool   `json:"running"`
	PID      int    `json:"pid"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Offset   uint64 `json:"offset"`
}

// TermInfo describes a terminal.
type TermInfo struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	Instance string `json:"instance"`
	Status
	Gone bool `json:"gone,omitempty"`
	// Unanswered: its instance daemon did not answer, so its status is not known.
	Unanswered bool `json:"unanswered,omitempty"`
}

// InstanceArgs creates an instance of a definition.
type InstanceArgs struct {
	Definition string `json:"definition"`
	Name       string `json:"name,omitempty"`
	// Agent and Session name the Allox session of an allox_session definition's instance.
	Agent   string `json:"agent,omitempty"`
	Session string `json:"session,omitempty"`
}

// InstanceInfo describes an instance.
type InstanceInfo struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	Definition string `json:"definition"`
	Owner      string `json:"owner"`
	Valid      bool   `json:"valid"`
	Terminals  int    `json:"terminals"`
	Agent      string `json:"agent,omitempty"`   // an allox_session instance's agent and session
	Session    string `json:"session,omitempty"` //
	Socket     string `json:"socket,omitempty"`  // the outer path, shown to the management entry
	PID        int    `json:"pid,omitempty"`     // the init's pid, shown to the management entry
}

// GrantArgs grants or revokes: exactly one of Definition, Instance, Terminal.
type GrantArgs struct {
	Tenant     string `json:"tenant"`
	Definition string `json:"definition,omitempty"`
	Instance   string `json:"instance,omitempty"`
	Terminal   string `json:"terminal,omitempty"`
}

// TenantArgs creates or removes a tenant.
type TenantArgs struct {
	Name string `json:"name"`
}

// TenantInfo describes a tenant and its entry.
type TenantInfo struct {
	Name        string   `json:"name"`
	Entry       string   `json:"entry"`
	Persistent  bool     `json:"persistent"`
	Definitions []string `json:"definitions,omitempty"`
	Instances   []string `json:"instances,omitempty"`
	Terminals   []string `json:"terminals,omitempty"`
	Connections []Peer   `json:"connections,omitempty"`
}

// Peer is a connected client as SO_PEERCRED saw it.
type Peer struct {
	PID int32  `json:"pid"`
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// LsResult lists what the tenant can see.
type LsResult struct {
	Terminals []TermInfo     `json:"terminals"`
	Instances []InstanceInfo `json:"instances,omitempty"`
}

// Exited is what an instance daemon sends its creator on the watch connection once a
// terminal's program has exited.
type Exited struct {
	ID string `json:"exited"`
}

// Hello is the instance daemon's ready answer.
type Hello struct {
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
	// PIDNamespace is the inode of the instance daemon's pid namespace: the one its terminals'
	// pids mean something in.
	PIDNamespace uint64 `json:"pid_namespace"`
}
