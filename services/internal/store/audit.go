package store

import (
	"github.com/allox-os/allox/services/internal/audit"
)

// audit appends the store's own record of a step that has taken effect to the daemon's audit log
// (package audit: stateDir/audit.jsonl, outside every rollback scope, like the index and the
// journal), as action "store.<op>" with origin "daemon". It is not fsynced and a failure to
// write it does not undo or fail the operation: the index and journal are the durable record.
func (s *Store) audit(op, agentID, sessionID, checkpointID, detail string) {
	_ = audit.Log{Dir: s.stateDir}.Append(audit.Entry{Action: "store." + op, AgentID: agentID, SessionID: sessionID,
		CheckpointID: checkpointID, Origin: audit.Daemon, Outcome: audit.OK, Detail: detail})
}
