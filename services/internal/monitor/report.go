package monitor

import (
	"context"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/plugin"
)

func (m *Monitor) report(_ context.Context, c *plugin.Call) (any, error) {
	var p sessionParams
	if err := rpc.DecodeParams(c.Params, &p); err != nil {
		return nil, err
	}
	recs, err := m.sessionRecords(p)
	if err != nil {
		return nil, err
	}
	turns, _ := m.turns.Turns(p.AgentID, p.SessionID)
	html, err := Report(p.AgentID, p.SessionID, recs, turns)
	if err != nil {
		return nil, err
	}
	return map[string]any{"html": html}, nil
}
