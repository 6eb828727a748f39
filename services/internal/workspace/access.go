package workspace

import (
	"context"

	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/services/internal/audit"
	"github.com/allox-os/allox/services/internal/fence"
	"github.com/allox-os/allox/services/internal/store"
	"github.com/allox-os/allox/services/internal/tracked"
)

// Reads: they change nothing and take no lock.

// GetAgent returns an agent.
func (s *Service) GetAgent(id string) (*store.Agent, error) { return s.store.GetAgent(id) }

// ListAgents returns every agent.
func (s *Service) ListAgents() ([]*store.Agent, error) { return s.store.ListAgents() }

// GetSession returns a session.
func (s *Service) GetSession(agent, id string) (*store.Session, error) {
	return s.store.GetSession(agent, id)
}

// ListSessions returns an agent's sessions.
func (s *Service) ListSessions(agent string) ([]*store.Session, error) {
	return s.store.ListSessions(agent)
}

// GetCheckpoint returns a checkpoint of a session.
func (s *Service) GetCheckpoint(agent, session, id string) (*store.Checkpoint, error) {
	return s.store.GetCheckpoint(agent, session, id)
}

// ListCheckpoints returns a session's checkpoints.
func (s *Service) ListCheckpoints(agent, session string) ([]*store.Checkpoint, error) {
	return s.store.ListCheckpoints(agent, session)
}

// SessionPaths returns the directories of a session: current/, shared/ and the agent's workspace.
func (s *Service) SessionPaths(agent, session string) (current, shared, agentWorkspace string, err error) {
	return s.store.SessionPaths(agent, session)
}

// SessionQuota is a session's space quota; ok is false without one.
func (s *Service) SessionQuota(agent, session string) (store.Quota, bool, error) {
	return s.store.SessionQuota(agent, session)
}

// AgentQuota is an agent's space quota; ok is false without one.
func (s *Service) AgentQuota(agent string) (store.Quota, bool, error) {
	return s.store.AgentQuota(agent)
}

// StoreQuota is the whole store's quota; ok is false without one.
func (s *Service) StoreQuota() (store.Quota, bool, error) { return s.store.StoreQuota() }

// Quarantined lists the sessions whose recovery could not finish.
func (s *Service) Quarantined() []store.Quarantine { return s.store.Quarantined() }

// FenceOf returns a session's fence; ok is false for an unfenced session.
func (s *Service) FenceOf(agent, session string) (f fence.Fence, ok bool) {
	return s.fences.Get(agent, session)
}

// TurnCheckpoints says whether the turn policy is on for the session (session "" : the agent's).
func (s *Service) TurnCheckpoints(agent, session string) bool {
	return s.policy.Enabled(agent, session)
}

// LimitBounds are the image's default and maximum session limits; ok is false when the daemon
// applies none.
func (s *Service) LimitBounds() (defaults, max limit.Set, ok bool) {
	if s.limits == nil {
		return limit.Set{}, limit.Set{}, false
	}
	return s.limits.Defaults, s.limits.Max, true
}

// AuditLog is the log the service records to; nil without one.
func (s *Service) AuditLog() *audit.Log { return s.auditLog }

// Run returns a copy of a run's status.
func (s *Service) Run(runID string) (*tracked.Status, error) { return s.runs.Get(runID) }

// WaitRun blocks until the run has ended or ctx is done.
func (s *Service) WaitRun(ctx context.Context, runID string) (*tracked.Status, error) {
	return s.runs.Wait(ctx, runID)
}

// ListRuns returns the runs of an agent's session (every session's if session is ""), oldest first.
func (s *Service) ListRuns(agent, session string) ([]*tracked.Status, error) {
	return s.runs.List(agent, session)
}

// ActiveRuns is the number of a session's live runs: its execution lease.
func (s *Service) ActiveRuns(agent, session string) int { return s.runs.Active(agent, session) }

// RunOutput reads a page of a run's stdout or stderr.
func (s *Service) RunOutput(runID, stream string, offset, limit int64) ([]byte, int64, bool, error) {
	return s.runs.Output(runID, stream, offset, limit)
}

// RunDropped is how many bytes of a run's stream were dropped beyond its bound.
func (s *Service) RunDropped(runID, stream string) (int64, error) {
	return s.runs.Dropped(runID, stream)
}

// RunTmpDir is a run's private /tmp staging directory ("" for an unknown run).
func (s *Service) RunTmpDir(runID string) string { return s.runs.TmpDir(runID) }

// GroupFiles are the limit files of a session's (or run's) cgroup.
func (s *Service) GroupFiles(agent, session, runID string) map[string]string {
	return s.runs.GroupFiles(agent, session, runID)
}

// CgroupDir is the cgroup v2 directory of a session (runID "") or of one of its runs.
func (s *Service) CgroupDir(agent, session, runID string) string {
	return s.runs.CgroupDir(agent, session, runID)
}

// RunsParentDir is the cgroup directory that holds every agent's, session's and run's group.
func (s *Service) RunsParentDir() string { return s.runs.ParentDir() }

// RunIdentity is the uid and gid of every sandboxed run.
func (s *Service) RunIdentity() (uid, gid uint32) { return s.runs.Identity() }

// Controllers are the cgroup controllers the runs' groups have.
func (s *Service) Controllers() []string { return s.runs.Controllers() }

// EnforcedLimits are the limits the runs' cgroups enforce.
func (s *Service) EnforcedLimits() []string { return s.runs.Enforced() }

// RunLimits are every run's default limits.
func (s *Service) RunLimits() limit.Set { return s.runs.RunLimits() }

// RunsMemoryMax is the memory.max of the runs' parent group.
func (s *Service) RunsMemoryMax() string { return s.runs.RunsMemoryMax() }

// RunOfPID names the run of agent/session that the process pid belongs to, or "" when it is none
// of that session's runs (a session socket's caller, by its SO_PEERCRED pid).
func (s *Service) RunOfPID(agent, session string, pid int) string {
	if pid <= 0 {
		return ""
	}
	a, sess, run := s.runs.RunOfPID(pid)
	if a != agent || sess != session {
		return ""
	}
	return run
}
