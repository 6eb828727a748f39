package daemon

import (
	"encoding/json"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/audit"
)

// auditEntry is the audit line of one call: the ids its params name (best effort: params that
// do not decode still give an entry), the run it started, its origin and its outcome.
func auditEntry(c *Call, res any, err error) audit.Entry {
	var ids struct {
		AgentID      string `json:"agent_id"`
		SessionID    string `json:"session_id"`
		CheckpointID string `json:"checkpoint_id"`
		RunID        string `json:"run_id"`
		TurnID       string `json:"turn_id"`
		Reason       string `json:"reason"`
	}
	_ = json.Unmarshal(c.Params, &ids)
	e := audit.Entry{Action: c.Action, AgentID: ids.AgentID, SessionID: ids.SessionID, CheckpointID: ids.CheckpointID,
		RunID: ids.RunID, TurnID: ids.TurnID, Origin: c.Origin.String(), Outcome: audit.OK, Detail: ids.Reason}
	if c.Caller != nil { // a session socket's call is about its caller, whatever it named
		e.AgentID, e.SessionID = c.Caller.AgentID, c.Caller.SessionID
	}
	if r, ok := res.(rpc.Run); ok && e.RunID == "" {
		e.RunID = r.RunID
	}
	if err != nil {
		re := rpcError(err)
		e.Outcome, e.Error = string(re.Code), re.Message
	}
	return e
}
