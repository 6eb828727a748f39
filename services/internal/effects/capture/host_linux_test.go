package capture

import (
	"crypto/rand"
	"encoding/hex"
	"github.com/allox-os/allox/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
	"github.com/allox-os/allox/services/internal/effects/verdict"
)

// requireRoot skips (or, with CI=true, fails) without root: every test
// here changes real host state.
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.Root(t, "to change sysctls, mounts, links, BPF and nftables", "./services/internal/effects/capture")
}

// suffix is a random name suffix, so that concurrent runs never collide.
func suffix(t *testing.T) string {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// observe runs the protocol 2 cycle on the real host: a workspace and a
// shared/ tree in a temp dir, capture A, change, capture B, close, load and
// verify, all through the evidence set as the observer writes it.
func observe(t *testing.T, sc *scope.Scope, cgroup string, change func(cfg *Config)) verdict.Report {
	t.Helper()
	base := t.TempDir()
	cfg := &Config{Workspace: filepath.Join(base, "current"), Shared: filepath.Join(base, "shared"), SessionCgroup: cgroup, Scope: sc}
	for _, d := range []string{cfg.Workspace, cfg.Shared} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	set, err := evidence.Create(filepath.Join(base, "evidence"), evidence.Header{
		Protocol: evidence.ProtocolDirect, RunID: "run-" + suffix(t), AgentID: "a", SessionID: "s",
		SessionCgroup: cgroupOr(cgroup), Workspace: cfg.Workspace, Shared: cfg.Shared, Scope: sc, Domains: sc.Domains(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, point := range []string{evidence.PointA, evidence.PointB} {
		if point == evidence.PointB {
			change(cfg)
		}
		for _, s := range All(cfg, point) {
			if s.Unconfirmable != "" {
				t.Errorf("%s at %s unconfirmable on this host: %s", s.Domain, point, s.Unconfirmable)
			}
			if err := set.WriteSnapshot(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(set.Path(evidence.HistoryFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := set.WriteHistory(evidence.History{}); err != nil { // no recorder in a capture test
		t.Fatal(err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	ev, err := evidence.Load(set.Dir())
	if err != nil {
		t.Fatal(err)
	}
	r := verdict.Verify(ev)
	if r.Evidence != verdict.Complete {
		t.Fatalf("evidence %s: %v", r.Evidence, r.Problems)
	}
	return r
}

func cgroupOr(c string) string {
	if c == "" {
		return "/sys/fs/cgroup/none"
	}
	return c
}

// named checks that domain is INCONSISTENT and has a change of kind whose
// key is keyPart or, failing that, contains it; it returns that change.
func named(t *testing.T, r verdict.Report, domain, kind, keyPart string) verdict.Change {
	t.Helper()
	if r.Verdict != verdict.Inconsistent {
		t.Errorf("verdict %s, want INCONSISTENT", r.Verdict)
	}
	for _, d := range r.Run.Domains {
		if d.Domain != domain {
			continue
		}
		if d.Verdict != verdict.Inconsistent {
			t.Fatalf("%s: %s (%s), want INCONSISTENT", domain, d.Verdict, d.Reason)
		}
		for _, exact := range []bool{true, false} {
			for _, c := range d.Changes {
				if c.Kind == kind && (c.Key == keyPart || !exact && strings.Contains(c.Key, keyPart)) {
					return c
				}
			}
		}
		t.Fatalf("%s changes %+v: none %s with key containing %q", domain, d.Changes, kind, keyPart)
	}
	t.Fatalf("domain %s not judged", domain)
	return verdict.Change{}
}
