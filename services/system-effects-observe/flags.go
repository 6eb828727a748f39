package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/allox-os/allox/services/internal/effects/capture"
	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// options are the command line of one observer.
type options struct {
	dir       string
	hashCache string // optional: file hashes from earlier runs of the session (capture.LoadHashCache)
	header    evidence.Header
	cfg       capture.Config
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("system-effects-observe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o                   options
		scopeFile           string
		scrub, requireConst bool
	)
	h := &o.header
	fs.StringVar(&o.dir, "evidence", "", "evidence set `dir` to create, outside every workspace (e.g. STATE/effects/<run_id>)")
	fs.StringVar(&o.hashCache, "hash-cache", "", "`file` in the daemon's state caching file hashes across runs of the session (unchanged files are not re-read)")
	fs.StringVar(&scopeFile, "scope", "", "scope `file` (JSON) selecting the domains beyond the workspace and shared/")
	fs.StringVar(&h.SessionCgroup, "cgroup", "", "cgroup v2 `dir` the run lives under, the run's own or its session's (the history recorder and the processes domain watch its subtree)")
	fs.StringVar(&h.Workspace, "workspace", "", "the Session Workspace (current/) `dir`")
	fs.StringVar(&h.Shared, "shared", "", "the agent's shared/ `dir`")
	fs.IntVar(&h.Protocol, "protocol", evidence.ProtocolDirect, "2 (direct, A→B) or 3 (recovery, A→B→C)")
	fs.StringVar(&h.RunID, "run-id", "", "run id")
	fs.StringVar(&h.AgentID, "agent", "", "agent id")
	fs.StringVar(&h.SessionID, "session", "", "session id")
	fs.StringVar(&h.BaselineCheckpoint, "baseline", "", "protocol 3: the checkpoint id the recovery restores")
	fs.BoolVar(&scrub, "scrub-runtime", false, "protocol 3: recovery.scrub_runtime")
	fs.BoolVar(&requireConst, "require-consistent", true, "protocol 3: recovery.require_consistent")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: every option is a flag", fs.Arg(0))
	}
	if o.dir == "" {
		return nil, errors.New("-evidence: missing; name a new directory outside every workspace")
	}
	var missing []error
	for flag, v := range map[string]string{"-cgroup": h.SessionCgroup, "-workspace": h.Workspace, "-shared": h.Shared,
		"-run-id": h.RunID, "-agent": h.AgentID, "-session": h.SessionID} {
		if v == "" {
			missing = append(missing, fmt.Errorf("%s: missing", flag))
		}
	}
	if h.Protocol == evidence.ProtocolRecovery && h.BaselineCheckpoint == "" {
		missing = append(missing, errors.New("-baseline: protocol 3 needs the checkpoint id the recovery restores"))
	}
	if err := errors.Join(missing...); err != nil {
		return nil, err
	}
	if scopeFile != "" {
		sc, err := scope.Load(scopeFile)
		if err != nil {
			return nil, fmt.Errorf("-scope: %w", err)
		}
		if err := sc.Overlap(h.Workspace, h.Shared); err != nil {
			return nil, fmt.Errorf("-scope: %w", err)
		}
		h.Scope = sc
	}
	h.Domains = h.Scope.Domains()
	if h.Protocol == evidence.ProtocolRecovery {
		h.Recovery = &evidence.Recovery{ScrubRuntime: scrub, RequireConsistent: requireConst}
	}
	o.cfg = capture.Config{Workspace: h.Workspace, Shared: h.Shared, SessionCgroup: h.SessionCgroup, Scope: h.Scope}
	return &o, nil
}
