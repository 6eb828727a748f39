package store

import (
	"fmt"
	"slices"
)

// agentQgroup returns the agent's qgroup (2/<n>), creating it as a member of 3/1 with the
// configured agent limit if it has none yet (or, with ensure, whatever of that is missing). With
// quotas off it returns 0.
func (s *Store) agentQgroup(agentID string, ensure bool) (qgroupID, error) {
	st, err := s.quotaState()
	if st == nil || err != nil {
		return 0, err
	}
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	r := s.quota.st.Agents[agentID]
	if r == nil {
		ensure = true
		r = &qgroupRec{Qgroup: mkQgroup(2, s.quota.st.Next), Limit: s.quota.st.Config.Agent}
		next := *s.quota.st
		next.Next++
		next.Agents = cloneRecs(next.Agents)
		next.Agents[agentID] = r
		if err := s.saveQuota(&next); err != nil { // recorded first: a crash leaves a known qgroup
			return 0, err
		}
	}
	if !ensure {
		return r.Qgroup, nil
	}
	return r.Qgroup, s.makeQgroup(r, allAgents)
}

// sessionQgroup returns the session's qgroup (1/<n>), creating it as a member of its agent's with
// limit bytes (0: the configured session limit) if it has none yet.
func (s *Store) sessionQgroup(agentID, sessionID string, limit int64, ensure bool) (qgroupID, error) {
	parent, err := s.agentQgroup(agentID, ensure)
	if parent == 0 || err != nil {
		return 0, err
	}
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	k := agentID + "/" + sessionID
	r := s.quota.st.Sessions[k]
	if r == nil {
		ensure = true
		if limit <= 0 {
			limit = s.quota.st.Config.Session
		}
		r = &qgroupRec{Qgroup: mkQgroup(1, s.quota.st.Next), Limit: limit}
		next := *s.quota.st
		next.Next++
		next.Sessions = cloneRecs(next.Sessions)
		next.Sessions[k] = r
		if err := s.saveQuota(&next); err != nil {
			return 0, err
		}
	}
	if !ensure {
		return r.Qgroup, nil
	}
	return r.Qgroup, s.makeQgroup(r, parent)
}

// makeQgroup creates r's qgroup as a member of parent and sets its limit; each step is
// idempotent.
func (s *Store) makeQgroup(r *qgroupRec, parent qgroupID) error {
	if err := qgroupCreate(s.fd(), r.Qgroup); err != nil {
		return err
	}
	if err := qgroupAssign(s.fd(), r.Qgroup, parent, true); err != nil {
		return err
	}
	return qgroupSetLimit(s.fd(), r.Qgroup, r.Limit)
}

func cloneRecs(m map[string]*qgroupRec) map[string]*qgroupRec {
	out := make(map[string]*qgroupRec, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// quotaAssign puts the subvolume name in dirfd into its session's qgroup, right after it is made
// and before anything can write to it. With quotas off it does nothing.
func (s *Store) quotaAssign(agentID, sessionID string, dirfd int, name string) error {
	return s.quotaAssignLimit(agentID, sessionID, dirfd, name, 0, false)
}

// quotaAssignLimit is quotaAssign for a new session's current/, whose qgroup gets limit bytes
// (0: the configured session limit). With ensure it also repairs the qgroups above.
func (s *Store) quotaAssignLimit(agentID, sessionID string, dirfd int, name string, limit int64, ensure bool) error {
	q, err := s.sessionQgroup(agentID, sessionID, limit, ensure)
	if q == 0 || err != nil {
		return err
	}
	id, err := subvolIDAt(dirfd, name)
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return qgroupAssign(s.fd(), mkQgroup(0, id), q, true)
}

// quotaAssignNew puts a new session's current/ into a new qgroup with limit bytes (0: the
// configured session limit).
func (s *Store) quotaAssignNew(agentID, sessionID string, limit int64) error {
	if st, err := s.quotaState(); st == nil || err != nil {
		return err
	}
	dir, err := openDir(s.fd(), sessionRel(agentID, sessionID))
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	defer dir.Close()
	if err := s.quotaAssignLimit(agentID, sessionID, int(dir.Fd()), "current", limit, false); err != nil {
		return err
	}
	return s.quotaAssign(agentID, sessionID, int(dir.Fd()), RunTmpDir)
}

// quotaFreed runs after a subvolume delete. A deleted subvolume gives its space back only when
// Btrfs's cleaner has reclaimed it, which it does after the next commit (up to 30 s later): when
// the agents' qgroup is within a tenth of its limit, commit now and wake the cleaner.
func (s *Store) quotaFreed() {
	if st, _ := s.quotaState(); st == nil {
		return
	}
	u, err := readQgroup(s.fd(), allAgents)
	if err != nil || u.Limit == 0 || u.Referenced < u.Limit-u.Limit/10 {
		return
	}
	fsSync(s.fd())
}

// quotaForget marks the qgroup of a deleted session (sessionID != "") or agent as dead and
// destroys every dead qgroup that is empty. A dead session's qgroup stays in its agent's until
// the cleaner has freed its last extent: until then that space is not free.
func (s *Store) quotaForget(agentID, sessionID string) {
	if st, _ := s.quotaState(); st == nil {
		return
	}
	s.quota.mu.Lock()
	next := *s.quota.st
	var r *qgroupRec
	if sessionID != "" {
		next.Sessions = cloneRecs(next.Sessions)
		r = next.Sessions[agentID+"/"+sessionID]
		delete(next.Sessions, agentID+"/"+sessionID)
	} else {
		next.Agents = cloneRecs(next.Agents)
		r = next.Agents[agentID]
		delete(next.Agents, agentID)
	}
	if r != nil {
		next.Dead = append(slices.Clone(next.Dead), r.Qgroup)
		s.saveQuota(&next) // on failure the next start finds the record without its session
	}
	s.quota.mu.Unlock()
	s.reapQgroups()
}

// reapQgroups destroys the dead qgroups that are empty, sessions' before agents', with the
// empty qgroups of deleted subvolumes in them. What is not empty yet is tried again later.
func (s *Store) reapQgroups() {
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	if s.quota.st == nil || len(s.quota.st.Dead) == 0 {
		return
	}
	dead := slices.Clone(s.quota.st.Dead)
	slices.Sort(dead) // level 1 before level 2
	var left []qgroupID
	for _, q := range dead {
		if !s.reapQgroup(q) {
			left = append(left, q)
		}
	}
	next := *s.quota.st
	next.Dead = left
	s.saveQuota(&next)
}

func (s *Store) reapQgroup(q qgroupID) bool {
	members, err := qgroupMembers(s.fd(), q)
	if err != nil {
		return false
	}
	for _, m := range members {
		if u, err := readQgroup(s.fd(), m); err == nil && u.Referenced == 0 {
			qgroupAssign(s.fd(), m, q, false)
			if m.level() == 0 {
				qgroupDestroy(s.fd(), m) // refused while its subvolume exists
			}
		}
	}
	return qgroupDestroy(s.fd(), q) == nil
}

// SessionQuota returns the session's limit and usage; ok is false with quotas off.
func (s *Store) SessionQuota(agentID, sessionID string) (q Quota, ok bool, err error) {
	st, err := s.quotaState()
	if st == nil || err != nil {
		return q, false, err
	}
	s.quota.mu.Lock()
	r := s.quota.st.Sessions[agentID+"/"+sessionID]
	s.quota.mu.Unlock()
	if r == nil {
		return q, false, nil
	}
	return s.readQuota(r.Qgroup)
}

// AgentQuota returns the agent's limit and usage (all its sessions); ok is false with quotas off.
func (s *Store) AgentQuota(agentID string) (q Quota, ok bool, err error) {
	st, err := s.quotaState()
	if st == nil || err != nil {
		return q, false, err
	}
	s.quota.mu.Lock()
	r := s.quota.st.Agents[agentID]
	s.quota.mu.Unlock()
	if r == nil {
		return q, false, nil
	}
	q, ok, err = s.readQuota(r.Qgroup)
	if ok && !s.sharedIsSubvol(agentID) {
		q.Unlimited = []string{"shared/"}
	}
	return q, ok, err
}

// StoreQuota returns the all-agents qgroup's limit and usage; ok is false with quotas off.
func (s *Store) StoreQuota() (q Quota, ok bool, err error) {
	st, err := s.quotaState()
	if st == nil || err != nil {
		return q, false, err
	}
	s.quota.mu.Lock()
	reserve := s.quota.st.Config.Reserve
	s.quota.mu.Unlock()
	q, ok, err = s.readQuota(allAgents)
	q.Reserve = reserve
	return q, ok, err
}

func (s *Store) readQuota(q qgroupID) (Quota, bool, error) {
	u, err := readQgroup(s.fd(), q)
	if err != nil {
		return Quota{}, false, fmt.Errorf("quota %s: %w", q, err)
	}
	return Quota{Qgroup: q.String(), Limit: int64(u.Limit), Used: int64(u.Referenced)}, true, nil
}

// quotaDetail is the audit detail of a session's new qgroup, "quota 1/3 limit 1048576" (limit 0:
// none); "" with quotas off.
func (s *Store) quotaDetail(agentID, sessionID string) string {
	if st, _ := s.quotaState(); st == nil {
		return ""
	}
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	r := s.quota.st.Sessions[agentID+"/"+sessionID]
	if r == nil {
		return ""
	}
	return fmt.Sprintf("quota %s limit %d", r.Qgroup, r.Limit)
}
