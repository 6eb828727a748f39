// Package scrub implements recovery.scrub_runtime of the system-effects
// protocol 3: removing the runtime residue of one run before its recovery
// is verified.
//
// The protocol 3 sequence is: capture A, release the agent, prove the run's
// process tree has exited and freeze its empty cgroup, capture B, then the
// recovery — scrub_runtime (when requested), the Allox rollback of the
// Session Workspace to the baseline checkpoint — and capture C.
//
// scrub_runtime touches exactly two things, both owned by the run alone:
//
//  1. The run's cgroup <session cgroup>/<run_id> and the groups below it:
//     cgroup.kill is written (every process left in the subtree gets
//     SIGKILL, including one that escaped the PID namespace or a frozen
//     one), the subtree is waited on until cgroup.events says
//     "populated 0", and the groups are removed, leaves first. The session
//     group, the agent group and other runs' groups are never written.
//  2. The run's private /tmp staging directory outside the workspace
//     (the tracked records dir's <run_id>/tmp), if it is still there.
//
// It never touches:
//   - the Session Workspace (current/), including its .allox-tmp/ (the
//     run's /tmp synced back on a normal exit): the rollback replaces
//     current/ wholesale with the baseline checkpoint, .allox-tmp/ included,
//     so removing it here would add nothing, and removing it after the
//     rollback would make C differ from A wherever the baseline has one;
//   - the agent's shared/ tree, which no Allox rollback restores either;
//   - system state: sysctls, mounts, BPF objects, network and netfilter
//     configuration, kernel modules. Their residue is the run's effect and
//     must reach the verdict (A→C INCONSISTENT, and with require_consistent
//     a fence), never be hidden by a scrub.
//
// Without scrub_runtime the run's (empty, frozen) cgroup stays for
// inspection until the daemon removes the session; the verdict is the same
// either way, because the processes domain counts processes, not groups.
package scrub
