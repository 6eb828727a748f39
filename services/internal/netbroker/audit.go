package netbroker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/allox-os/allox/services/internal/audit"
)

// AuditFile is the broker's log in its audit directory; rotated files are AuditFile.1 (newest) …
const AuditFile = "network.jsonl"

// Kinds of a Record.
const (
	KindHTTP    = "http"    // a forward-proxied request
	KindCONNECT = "CONNECT" // a proxy CONNECT tunnel
	KindConnect = "connect" // allox network connect
)

// Decisions of a Record besides the policy's "allow" and "deny".
const (
	Allowed = "allow"
	Denied  = "deny"
	Limited = "limit" // refused: the session had MaxConns connections open
	Failed  = "error" // allowed, but the destination could not be reached or the request was malformed
)

// Record is one line of the network audit.
type Record struct {
	Time       time.Time `json:"time"` // when the request came in
	AgentID    string    `json:"agent_id"`
	SessionID  string    `json:"session_id"`
	RunID      string    `json:"run_id,omitempty"` // connect only: the proxy's listener is shared by the session's runs
	Kind       string    `json:"kind"`
	Method     string    `json:"method"` // the HTTP method, "CONNECT" or "connect"
	Host       string    `json:"host"`   // as the client named it
	Address    string    `json:"address,omitempty"`
	Port       uint16    `json:"port"`
	Decision   string    `json:"decision"`
	Rule       string    `json:"rule,omitempty"`
	Status     int       `json:"status,omitempty"` // the HTTP status returned to the client
	Error      string    `json:"error,omitempty"`
	BytesUp    int64     `json:"bytes_up"`   // client to destination
	BytesDown  int64     `json:"bytes_down"` // destination to client
	DurationNS int64     `json:"duration_ns"`
}

// AuditLog appends Records to Dir/network.jsonl with the rotation of the daemon's audit log:
// zero MaxBytes and Keep mean 8 MiB and 4 older files.
type AuditLog struct {
	Dir      string
	MaxBytes int64
	Keep     int
}

func (l AuditLog) log() audit.Log {
	return audit.Log{Dir: l.Dir, Name: AuditFile, MaxBytes: l.MaxBytes, Keep: l.Keep}
}

// Append writes r as one line, its strings clipped (they come from requests).
func (l AuditLog) Append(r Record) error {
	for _, s := range []*string{&r.AgentID, &r.SessionID, &r.RunID, &r.Method, &r.Host, &r.Rule, &r.Error} {
		*s = clip(*s)
	}
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("network audit: %w", err)
	}
	return l.log().AppendLine(append(line, '\n'))
}

// Query selects a page of the audit: the records of AgentID (and SessionID) when set, oldest
// first, skipping Offset of them and returning at most Limit (0 means 100).
type Query struct {
	AgentID   string `json:"agent_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Offset    int    `json:"offset,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// Page is one page of the audit. Next is the Offset of the next page, or 0 when this one is the last.
type Page struct {
	Records []Record `json:"records"`
	Total   int      `json:"total"` // matching records still kept
	Next    int      `json:"next,omitempty"`
}

// MaxPage bounds Query.Limit.
const MaxPage = 1000

// ReadAudit returns the page q selects from the records kept in dir.
func ReadAudit(dir string, q Query) (Page, error) {
	switch {
	case q.Offset < 0:
		return Page{}, fmt.Errorf("offset %d: must be 0 or more", q.Offset)
	case q.Limit < 0 || q.Limit > MaxPage:
		return Page{}, fmt.Errorf("limit %d: must be 0 (the default, 100) to %d", q.Limit, MaxPage)
	case q.SessionID != "" && q.AgentID == "":
		return Page{}, errors.New("session_id without agent_id: sessions are named within an agent, set agent_id too")
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	p := Page{Records: []Record{}}
	for _, path := range audit.Files(dir, AuditFile) {
		if err := scanFile(path, func(r Record) {
			if (q.AgentID != "" && r.AgentID != q.AgentID) || (q.SessionID != "" && r.SessionID != q.SessionID) {
				return
			}
			if p.Total >= q.Offset && len(p.Records) < q.Limit {
				p.Records = append(p.Records, r)
			}
			p.Total++
		}); err != nil {
			return Page{}, err
		}
	}
	if end := q.Offset + len(p.Records); end < p.Total {
		p.Next = end
	}
	return p, nil
}

func scanFile(path string, each func(Record)) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // rotated away under us, or not written yet
	}
	if err != nil {
		return fmt.Errorf("network audit: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("network audit: %s: %w", path, err)
		}
		each(r)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("network audit: %s: %w", path, err)
	}
	return nil
}
