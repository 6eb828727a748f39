package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/allox-os/allox/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// Space limits, with Btrfs simple quotas (squota, kernel >= 6.7). The hierarchy:
//
//	0/<subvolid>  every subvolume of a session: current/, each checkpoint, a rollback's new copy,
//	              .run-tmp (the runs' private /tmp); and each agent's shared/
//	1/<n>         one per session, holding its subvolumes; limit: the session's quota
//	2/<n>         one per agent, holding its sessions and its shared/; limit: the agent's quota
//	3/1           all agents, holding every agent; limit: what the store can hold minus the reserve
//
// The daemon's state (the state directory, by default ROOT/.allox-state) is outside agents/ and
// so in no session's subvolume: it is charged to the root's own subvolume, which is in none of
// these qgroups. No write by any run counts against it, and 3/1 leaves the reserve free for it.
//
// Simple quotas charge an extent to the subvolume that allocated it, for as long as any
// subvolume still refers to it. A snapshot is charged only its root node (16 KiB): what it shares
// stays charged to the subvolume that wrote it, and that qgroup stays a member of the session's
// qgroup after the subvolume is deleted (until its last extent is freed). So a session is charged
// each byte it wrote that some subvolume of it still holds: a checkpoint costs only what changes
// after it (the old data it keeps alive), and deleting it gives that back.
//
// Usage is read from the quota tree: what the last transaction committed (at most the commit
// interval, 30 s by default, old; a checkpoint commits).

// QuotaConfig are the store's space limits, in bytes.
type QuotaConfig struct {
	// Session is every session's limit unless CreateSessionWith asks for another; Agent every
	// agent's. 0: none (the qgroup still reports usage).
	Session, Agent int64
	// Reserve is what all agents together leave free for the daemon's state.
	Reserve int64
}

// Quota is one qgroup's limit and usage.
type Quota struct {
	Qgroup string // e.g. "1/3"
	Limit  int64  // bytes; 0: none
	Used   int64  // bytes charged, as of the last transaction commit
	// Reserve is, for the store's qgroup (3/1), what all agents leave free for the daemon's state.
	Reserve int64
	// Unlimited names what of an agent is outside its qgroup: "shared/" when it is an older,
	// non-empty plain directory (quota_dirs.go).
	Unlimited []string
}

// allAgents is the qgroup of every agent.
var allAgents = mkQgroup(3, 1)

type quotaState struct {
	Config   QuotaConfig           `json:"config"`
	Next     uint64                `json:"next"` // next free number at levels 1 and 2
	Agents   map[string]*qgroupRec `json:"agents"`
	Sessions map[string]*qgroupRec `json:"sessions"` // agent/session
	Dead     []qgroupID            `json:"dead,omitempty"`
}

type qgroupRec struct {
	Qgroup qgroupID `json:"qgroup"`
	Limit  int64    `json:"limit"`
}

// quotas is the store's quota state, stateDir/quota.json; nil fields: quotas are off.
type quotas struct {
	once sync.Once
	mu   sync.Mutex
	st   *quotaState // nil: quotas are off
	err  error
}

const quotaFile = "quota.json"

// quotaState loads the state once: stores opened by other processes (the observer's recover)
// assign what they create as the daemon does.
func (s *Store) quotaState() (*quotaState, error) {
	q := &s.quota
	q.once.Do(func() {
		b, err := os.ReadFile(filepath.Join(s.stateDir, quotaFile))
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		st := &quotaState{}
		if err == nil {
			err = json.Unmarshal(b, st)
		}
		if err != nil {
			q.err = fmt.Errorf("quota state: %w", err)
			return
		}
		if st.Agents == nil {
			st.Agents = map[string]*qgroupRec{}
		}
		if st.Sessions == nil {
			st.Sessions = map[string]*qgroupRec{}
		}
		q.st = st
	})
	return q.st, q.err
}

// saveQuota persists st. The caller holds s.quota.mu.
func (s *Store) saveQuota(st *quotaState) error {
	b, err := jsonIndent(st)
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.stateDir, quotaFile), b, 0o600)
	}
	if err != nil {
		return fmt.Errorf("save quota state: %w", err)
	}
	s.quota.st = st
	return nil
}

// EnableQuota turns simple quotas on (from then on for good: the state remembers it), applies
// cfg to new agents and sessions, puts every existing agent, session and subvolume into its
// qgroup, sets the all-agents limit and destroys the empty qgroups of deleted sessions and agents.
// It refuses a filesystem with full qgroups on, and a kernel without simple quotas.
func (s *Store) EnableQuota(cfg QuotaConfig) error {
	if err := s.quotaOn(); err != nil {
		return fmt.Errorf("enable quotas: %w", err)
	}
	st, err := s.quotaState()
	if err != nil {
		return err
	}
	s.quota.mu.Lock()
	if st == nil {
		st = &quotaState{Next: 1, Agents: map[string]*qgroupRec{}, Sessions: map[string]*qgroupRec{}}
	}
	changed := st.Config != cfg
	st.Config = cfg
	err = s.saveQuota(st)
	s.quota.mu.Unlock()
	if err != nil {
		return err
	}
	if changed {
		s.audit("quota.config", "", "", "", fmt.Sprintf("session %d agent %d reserve %d", cfg.Session, cfg.Agent, cfg.Reserve))
	}
	if err := s.reconcileQuota(); err != nil {
		return fmt.Errorf("enable quotas: %w", err)
	}
	return s.limitAllAgents()
}

// quotaOn enables simple quotas unless they are on.
func (s *Store) quotaOn() error {
	on, simple, _, err := quotaStatus(s.fd())
	if err != nil {
		return err
	}
	if on && !simple {
		return errors.New("full qgroups are on on this filesystem, and they slow every extent operation " +
			"(snapshots, deletes); the store uses simple quotas: run btrfs quota disable on it, then restart")
	}
	if on {
		return nil
	}
	if err := quotaEnableSimple(s.fd()); err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("%w: simple quotas need Linux 6.7 or later; run a newer kernel or drop the quota settings", err)
		}
		return err
	}
	return nil
}

// limitAllAgents sets 3/1's limit to what the agents use now plus what is free minus the reserve:
// the reserve stays free for the daemon's state.
func (s *Store) limitAllAgents() error {
	st, _ := s.quotaState()
	if st == nil {
		return nil
	}
	if err := unix.Syncfs(s.fd()); err != nil {
		return fmt.Errorf("syncfs: %w", err)
	}
	u, err := readQgroup(s.fd(), allAgents)
	if err != nil {
		return err
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(s.fd(), &sfs); err != nil {
		return err
	}
	limit := int64(u.Referenced) + int64(sfs.Bavail)*sfs.Bsize - st.Config.Reserve
	if limit < int64(u.Referenced)+1 {
		limit = int64(u.Referenced) + 1 // full: every agent's write is refused
	}
	return qgroupSetLimit(s.fd(), allAgents, limit)
}

// reconcileQuota makes the qgroups match the index: one per agent and session, every subvolume
// of a session in its session's qgroup; records without an agent or session become dead.
func (s *Store) reconcileQuota() error {
	if err := qgroupCreate(s.fd(), allAgents); err != nil {
		return err
	}
	s.mu.Lock()
	sessions := map[string][2]string{}
	agents := []string{}
	for aid, a := range s.ix.Agents {
		agents = append(agents, aid)
		for sid := range a.Sessions {
			sessions[aid+"/"+sid] = [2]string{aid, sid}
		}
	}
	s.mu.Unlock()
	sort.Strings(agents)
	for _, aid := range agents {
		if _, err := s.agentQgroup(aid, true); err != nil {
			return err
		}
		if _, err := s.ensureShared(aid); err != nil {
			return fmt.Errorf("agent %s: shared/: %w", aid, err)
		}
	}
	for _, k := range sortedKeys(sessions) {
		aid, sid := sessions[k][0], sessions[k][1]
		if err := s.assignSessionSubvols(aid, sid); err != nil {
			return fmt.Errorf("session %s: %w", k, err)
		}
	}
	s.quota.mu.Lock()
	st := *s.quota.st
	st.Agents, st.Sessions = map[string]*qgroupRec{}, map[string]*qgroupRec{}
	for k, r := range s.quota.st.Sessions {
		if _, ok := sessions[k]; ok {
			st.Sessions[k] = r
		} else {
			st.Dead = append(st.Dead, r.Qgroup)
		}
	}
	for k, r := range s.quota.st.Agents {
		if i := sort.SearchStrings(agents, k); i < len(agents) && agents[i] == k {
			st.Agents[k] = r
		} else {
			st.Dead = append(st.Dead, r.Qgroup)
		}
	}
	err := s.saveQuota(&st)
	s.quota.mu.Unlock()
	if err != nil {
		return err
	}
	s.reapQgroups()
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// assignSessionSubvols puts current/, every checkpoint and any rollback copy into the session's
// qgroup.
func (s *Store) assignSessionSubvols(agentID, sessionID string) error {
	dir, err := openDir(s.fd(), sessionRel(agentID, sessionID))
	if err != nil {
		return nil // nothing to assign; operations on the session report it
	}
	defer dir.Close()
	if ok, err := subvolInPlace(int(dir.Fd()), RunTmpDir, runTmpMode); err != nil {
		return fmt.Errorf("%s: %w", RunTmpDir, err)
	} else if ok {
		if err := s.quotaAssign(agentID, sessionID, int(dir.Fd()), RunTmpDir); err != nil {
			return err
		}
	}
	names, _ := dir.Readdirnames(-1)
	for _, n := range names {
		if n == "current" || isRollbackSwap(n) {
			if err := s.quotaAssignLimit(agentID, sessionID, int(dir.Fd()), n, 0, true); err != nil {
				return err
			}
		}
	}
	cps, err := openDir(int(dir.Fd()), "checkpoints")
	if err != nil {
		return nil
	}
	defer cps.Close()
	names, _ = cps.Readdirnames(-1)
	for _, n := range names {
		if err := s.quotaAssign(agentID, sessionID, int(cps.Fd()), n); err != nil {
			return err
		}
	}
	return nil
}
