// Package lifecycle runs managed executions under the system-effects observer: it is the daemon's
// side of the plugin (Plugin API v1: its run hooks, its process.start params and the host-only
// observer.abort action).
//
// For every process.start, before the agent really starts:
//   - protocol 3 only (recovery requested): the session must be free of other runs, and a baseline
//     checkpoint is created and pinned (or the explicit checkpoint_id must exist and is pinned);
//   - the run's cgroup is created and frozen with bwrap waiting on its block fd (package tracked);
//   - the observer program, loaded from a sealed in-memory copy whose sha256 matches its pin, runs
//     as a separate privileged process and captures A; only then is the agent released. The plugin
//     keeps one observer on standby (started with --standby while the previous agent runs, at nice
//     19: it decodes the kernel's BTF for its history recorder and loads nothing into the kernel);
//     a run takes it and hands it its command line, after checking the program file against its
//     pin again.
//
// Once the whole process tree has exited and the empty cgroup is frozen again:
//   - the observer captures B (it stops its history recorder first);
//   - protocol 3: the hash-pinned recover program restores the Session Workspace to the baseline
//     through the store's journaled rollback, while the daemon has lent it the store (Handover);
//     then the observer captures C;
//   - the observer closes the evidence set and exits; the independent verifier (protocol 2) or
//     recovery verifier (protocol 3), also hash-pinned, reads only the evidence set and writes its
//     report; the run record carries the verdict and the evidence path (process.get "effects").
//
// Fencing: any fault of the observer or a verifier at start, during the run (the observer
// process dying, e.g. killed) or at teardown, a pin mismatch, INCOMPLETE evidence, or (protocol 3
// with require_consistent, the default) A→C not CONSISTENT fences the session with the reason and
// the evidence path. A fault during the run also kills the run: nothing runs unobserved.
// Unverified evidence is never reported as success.
package lifecycle
