package tracked

import (
	"context"
	"errors"
	"fmt"
)

// ForgetSession removes the cgroup of a deleted session (killing whatever is left in it, which
// after the session's deletion is nothing a run should still have).
func (m *Manager) ForgetSession(agentID, sessionID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	if err := m.cg.removeTree(ctx, m.cg.group(agentID, sessionID)); err != nil {
		return fmt.Errorf("cgroup of session %s/%s: %w", agentID, sessionID, err)
	}
	return nil
}

// ForgetAgent removes the cgroup of a deleted agent.
func (m *Manager) ForgetAgent(agentID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	if err := m.cg.removeTree(ctx, m.cg.group(agentID)); err != nil {
		return fmt.Errorf("cgroup of agent %s: %w", agentID, err)
	}
	return nil
}

// PruneCgroups removes the agent and session groups below the runs' parent that keep does not
// want (keep(agent, "") asks about an agent): those of sessions and agents deleted while the
// daemon was down or before their groups were removed. Call it at start-up, before any run.
func (m *Manager) PruneCgroups(keep func(agentID, sessionID string) bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	var errs []error
	for _, a := range m.cg.children(m.cg.parent) {
		if !keep(a, "") {
			errs = append(errs, m.cg.removeTree(ctx, m.cg.group(a)))
			continue
		}
		for _, s := range m.cg.children(m.cg.group(a)) {
			if !keep(a, s) {
				errs = append(errs, m.cg.removeTree(ctx, m.cg.group(a, s)))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("prune cgroups: %w", err)
	}
	return nil
}
