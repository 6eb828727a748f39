package wire

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"
)

// The dialog channel (forward-only delivery, metadata-only persistence). A question's content —
// its prompt, options, default and the answer's choice — is only ever in memory: in the appliance,
// in the Probe, on the wire and in the Gateway replicas' memory while it is open. The Gateway's
// store and audit get the metadata alone (DialogRecord).
const (
	// PathDialogSync is the Probe's dialog stream to one replica: it sends what it holds open and
	// what ended, and long-polls the answers queued for its host on that replica.
	PathDialogSync = "/v1/probe/dialog"
	// PathDialog lists the dialog requests (admin); PathDialogAnswer answers one.
	PathDialog       = "/v1/dialog"
	PathDialogAnswer = "/v1/dialog/answer"
)

// Dialog outcomes as the Gateway records them.
const (
	DialogOpen      = "open"
	DialogAnswered  = "answered"
	DialogDefault   = "default"   // the timeout took the question's default
	DialogCancelled = "cancelled" // the asking run went away
	DialogExpired   = "expired"   // past its deadline with no outcome from the Probe (it was lost)
)

// DialogRequest is an open question as the Probe forwards it: content included, never stored.
type DialogRequest struct {
	RequestID string    `json:"request_id"`
	DevBox    string    `json:"devbox"`
	Agent     string    `json:"agent"`
	Session   string    `json:"session"`
	RunID     string    `json:"run_id,omitempty"`
	Kind      string    `json:"kind"`
	Source    string    `json:"source,omitempty"`
	Asked     time.Time `json:"asked"`    // the host's clock
	Deadline  time.Time `json:"deadline"` // the host's clock: the appliance takes the default then
	Prompt    string    `json:"prompt"`
	Options   []string  `json:"options,omitempty"`
	Default   string    `json:"default"`
}

// DialogEnd is how a question ended on its appliance: metadata.
type DialogEnd struct {
	RequestID   string    `json:"request_id"`
	DevBox      string    `json:"devbox"`
	Outcome     string    `json:"outcome"` // DialogAnswered, DialogDefault, DialogCancelled
	By          string    `json:"by,omitempty"`
	AnswerBytes int       `json:"answer_bytes"`
	At          time.Time `json:"at"`
}

// DialogAnswer is an answer a replica queued for a Probe to deliver.
type DialogAnswer struct {
	AnswerID  string `json:"answer_id"`
	RequestID string `json:"request_id"`
	DevBox    string `json:"devbox"`
	Agent     string `json:"agent"`
	Session   string `json:"session"`
	Choice    string `json:"choice"`
	By        string `json:"by"`
	TraceID   string `json:"trace_id"`
}

// Delivery results.
const (
	DeliveredOK    = "ok"
	DeliveredLate  = "late"    // the question had taken its default
	DeliveredEnded = "ended"   // answered by another, or cancelled
	DeliveredWrong = "refused" // the Probe holds no such question of that DevBox and session
	DeliveredError = "error"
)

// DialogResult is what delivering an answer did. Message never holds content.
type DialogResult struct {
	AnswerID string `json:"answer_id"`
	Result   string `json:"result"`
	Message  string `json:"message,omitempty"`
}

// DialogSync is one turn of a Probe's dialog stream to a replica.
type DialogSync struct {
	Host    string          `json:"host"`
	Epoch   int64           `json:"epoch"`
	Open    []DialogRequest `json:"open"`
	Ended   []DialogEnd     `json:"ended,omitempty"`
	Results []DialogResult  `json:"results,omitempty"`
	// Wait is how long the replica may hold the reply for an answer.
	Wait time.Duration `json:"wait"`
}

// DialogAnswers is a replica's reply to a sync: the answers queued for the host.
type DialogAnswers struct {
	Answers []DialogAnswer `json:"answers"`
}

// DialogRecord is a request's metadata, as the Gateway stores it (etcd) and lists it.
type DialogRecord struct {
	RequestID   string    `json:"request_id"`
	Host        string    `json:"host"`
	Epoch       int64     `json:"epoch"`
	DevBox      string    `json:"devbox"`
	Agent       string    `json:"agent"`
	Session     string    `json:"session"`
	RunID       string    `json:"run_id,omitempty"`
	Kind        string    `json:"kind"`
	Source      string    `json:"source,omitempty"`
	Asked       time.Time `json:"asked"`
	Deadline    time.Time `json:"deadline"`
	PromptBytes int       `json:"prompt_bytes"`
	Options     int       `json:"options"`
	Outcome     string    `json:"outcome"`
	By          string    `json:"by,omitempty"`
	AnswerBytes int       `json:"answer_bytes,omitempty"`
	Ended       time.Time `json:"ended,omitzero"`
	Late        int       `json:"late,omitempty"` // answers refused for coming after the deadline
}

// DialogItem is a listed request: its metadata and, when this replica holds it in memory, its
// content.
type DialogItem struct {
	DialogRecord
	Content *DialogContent `json:"content,omitempty"`
	// Holder says where the content is when this replica does not hold it.
	Holder string `json:"holder,omitempty"`
}

// DialogContent is a question's content, from memory.
type DialogContent struct {
	Prompt  string   `json:"prompt"`
	Options []string `json:"options,omitempty"`
	Default string   `json:"default"`
}

// DialogAnswerRequest is a person's answer. DevBox and Session must name the request's own
// session: an id of another session is refused.
type DialogAnswerRequest struct {
	DevBox    string `json:"devbox"`
	Session   string `json:"session"`
	RequestID string `json:"request_id"`
	Choice    string `json:"choice"`
}

// DialogClient is a Probe's dialog stream to one replica: unlike the other calls, which stay on
// one replica, a Probe streams to every replica, so that each holds the content of its open
// questions in memory and can reach it with an answer.
type DialogClient struct {
	c        *conn
	Host     string
	Endpoint string
}

// NewDialogClients returns one client per replica endpoint.
func NewDialogClients(host string, endpoints []string, tc *tls.Config) ([]*DialogClient, error) {
	var out []*DialogClient
	for _, e := range endpoints {
		c, err := newConn([]string{e}, tc)
		if err != nil {
			return nil, err
		}
		out = append(out, &DialogClient{c: c, Host: host, Endpoint: e})
	}
	return out, nil
}

// Sync sends s and returns the answers the replica has queued.
func (d *DialogClient) Sync(ctx context.Context, s DialogSync) (DialogAnswers, error) {
	var out DialogAnswers
	s.Host = d.Host
	err := d.c.do(ctx, http.MethodPost, PathDialogSync, NewTraceID(), s, &out)
	return out, err
}
