// Package verdict judges an evidence set: pure functions from an
// evidence.Evidence to a report, no I/O, and Judge, the one body of both
// verifier commands (load the set, judge it, write the report into it).
//
// Per domain and transition (e.g. A→B) a domain is
//   - CONSISTENT: equal at both points (under the domain's rule below),
//   - INCONSISTENT: something changed; the report names every added, removed
//     and changed item,
//   - INCONCLUSIVE: the domain was unconfirmable, or its snapshot is missing,
//     at one of the points.
//
// Severity runs CONSISTENT < INCONCLUSIVE < INCONSISTENT; a transition's
// verdict is the worst of its domains and the overall verdict the worst of
// the transitions that decide it. A verdict is never promoted: evidence that
// is not COMPLETE (see evidence.Load) caps the overall verdict at
// INCONCLUSIVE, i.e. a CONSISTENT result becomes INCONCLUSIVE and an
// INCONSISTENT one stays INCONSISTENT.
//
// Domain rules:
//   - workspace (the Session Workspace): expected to change across A→B (the
//     run's effects) and B→C (the recovery); its changes are reported as
//     Effects and do not count. Across A→C it must equal A: that is what
//     "recovered" means.
//   - processes: a process (pid + start time) present at the later point but
//     not at the earlier one is a residue (INCONSISTENT); processes that
//     exited are listed but are not inconsistent (the frozen launcher of the
//     run is in the session cgroup at A and gone at B). The residue a
//     managed run left in its frozen group (residue.jsonl, taken before the
//     daemon killed it) counts as present at B; without the processes
//     domain in scope, every residue process is reported on its own.
//   - every other domain (shared/, paths, sysctl, bpf, mounts, network,
//     netfilter, modules) must be equal item for item. shared/ is outside the
//     Session Workspace and no Allox rollback restores it.
//
// Protocol 2 (direct) judges A→B. Protocol 3 (recovery) reports A→B as the
// run's effects and judges B→C (the recovery may have changed nothing but
// the Session Workspace) and A→C (everything equals A). The verifier has
// passed when the evidence is COMPLETE and B→C is CONSISTENT; the session
// must be fenced when it has not passed, or when require_consistent is set
// and A→C is not CONSISTENT.
package verdict
