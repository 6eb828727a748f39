package store

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The two places a run writes outside current/ are subvolumes of their own, so that what it
// writes there is charged like current/:
//
//	agents/<a>/workspace/sessions/<s>/.run-tmp   the runs' private /tmp (0711 root); in 1/<session>
//	agents/<a>/workspace/shared                  the agent's shared files (0755); in 2/<agent>
//
// Both are made so with the session and the agent. Older ones are plain directories in the
// store's top-level subvolume, charged to no qgroup: an empty one is replaced by a subvolume
// (.run-tmp before each start, shared/ when quotas are enabled at start-up); a non-empty
// shared/ is left as it is and AgentQuota reports it as unlimited (moving an agent's files would
// break hard links and reflinks and take as long as the copy: delete or empty it to bring it
// under the quota). Neither is in any checkpoint, and a rollback never touches them.

const (
	sharedDir  = "shared"
	runTmpMode = 0o711
	sharedMode = 0o755
)

// makeSubvolDir creates the subvolume name in dirfd with mode (a new subvolume's root is 0755).
func makeSubvolDir(dirfd int, name string, mode uint32) error {
	if err := subvolCreate(dirfd, name); err != nil {
		return err
	}
	if err := unix.Fchmodat(dirfd, name, mode, 0); err != nil {
		return fmt.Errorf("chmod %s: %w", name, err)
	}
	return nil
}

// subvolInPlace replaces the empty plain directory name in dirfd by a subvolume with the same
// owner and mode. It reports whether name is a subvolume now: false, nil for a non-empty
// directory (left as it is).
func subvolInPlace(dirfd int, name string, mode uint32) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return true, makeSubvolDir(dirfd, name, mode)
	}
	if err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, fmt.Errorf("%s is not a directory (mode %#o): remove it", name, st.Mode)
	}
	if st.Ino == firstFreeObjID {
		return true, nil
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return false, nil
		}
		return false, fmt.Errorf("replace %s by a subvolume: %w", name, err)
	}
	if err := makeSubvolDir(dirfd, name, st.Mode&0o7777); err != nil {
		return false, err
	}
	if err := unix.Fchownat(dirfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, fmt.Errorf("chown %s: %w", name, err)
	}
	return true, nil
}

// ensureRunTmp makes the session's .run-tmp a subvolume in the session's qgroup if it is an
// empty plain directory (a session made before it was one). An empty .run-tmp is used by no run.
// A non-empty one is left until the next start-up empties it.
func (s *Store) ensureRunTmp(agentID, sessionID string) error {
	dir, err := openDir(s.fd(), sessionRel(agentID, sessionID))
	if err != nil {
		return err
	}
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), RunTmpDir, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Ino == firstFreeObjID {
		return nil // the common case: one stat per start
	}
	ok, err := subvolInPlace(int(dir.Fd()), RunTmpDir, runTmpMode)
	if !ok || err != nil {
		return err
	}
	return s.quotaAssign(agentID, sessionID, int(dir.Fd()), RunTmpDir)
}

// ensureShared makes the agent's shared/ a subvolume in the agent's qgroup if it is an empty
// plain directory. It reports whether shared/ is a subvolume (false: non-empty, unlimited).
func (s *Store) ensureShared(agentID string) (bool, error) {
	ws, err := openDir(s.fd(), workspaceRel(agentID))
	if err != nil {
		return false, err
	}
	defer ws.Close()
	ok, err := subvolInPlace(int(ws.Fd()), sharedDir, sharedMode)
	if !ok || err != nil {
		return ok, err
	}
	return true, s.quotaAssignAgent(agentID, int(ws.Fd()), sharedDir)
}

// quotaAssignAgent puts the subvolume name in dirfd (the agent's shared/) into the agent's
// qgroup. With quotas off it does nothing.
func (s *Store) quotaAssignAgent(agentID string, dirfd int, name string) error {
	q, err := s.agentQgroup(agentID, false)
	if q == 0 || err != nil {
		return err
	}
	id, err := subvolIDAt(dirfd, name)
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	return qgroupAssign(s.fd(), mkQgroup(0, id), q, true)
}

// sharedIsSubvol reports whether the agent's shared/ is a subvolume (so under its quota).
func (s *Store) sharedIsSubvol(agentID string) bool {
	ws, err := openDir(s.fd(), workspaceRel(agentID))
	if err != nil {
		return false
	}
	defer ws.Close()
	var st unix.Stat_t
	err = unix.Fstatat(int(ws.Fd()), sharedDir, &st, unix.AT_SYMLINK_NOFOLLOW)
	return err == nil && st.Ino == firstFreeObjID
}
