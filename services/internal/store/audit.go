package store

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// event is one line of stateDir/audit.jsonl, the store's audit trail. It lives outside every
// rollback scope, like the index and the journal.
type event struct {
	Time       time.Time `json:"time"`
	Op         string    `json:"op"`
	Agent      string    `json:"agent_id,omitempty"`
	Session    string    `json:"session_id,omitempty"`
	Checkpoint string    `json:"checkpoint_id,omitempty"`
	Detail     string    `json:"detail,omitempty"`
}

const auditFile = "audit.jsonl"

// audit appends an event after the operation has taken effect. It is not fsynced and a failure
// to write it does not undo or fail the operation: the index and journal are the durable record.
func (s *Store) audit(op, agentID, sessionID, checkpointID, detail string) {
	b, err := json.Marshal(event{Time: time.Now().UTC(), Op: op, Agent: agentID, Session: sessionID,
		Checkpoint: checkpointID, Detail: detail})
	if err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(s.stateDir, auditFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	f.Write(append(b, '\n'))
	f.Close()
}
