package lifecycle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/history"
	"github.com/allox-os/allox/services/internal/effects/verdict"
)

// The two names differ only in a byte that is not UTF-8: a lossy encoding (U+FFFD for both) would
// make a rename between them invisible.
const nameFE, nameFF = "f\xfe", "f\xff"

// renameFEtoFF is the run's script: mv f\376 f\377 in the directory $1.
const renameFEtoFF = `cd "$1" && mv "$(printf 'f\376')" "$(printf 'f\377')"`

// TestRenameBetweenInvalidUTF8Names: a managed run under protocol 3 renames f\xfe to f\xff. In the
// agent's shared/, which no recovery restores, the result is INCONSISTENT naming shared and the
// session is fenced; in the Session Workspace the rename is the run's effect A→B (removed f\xfe,
// added f\xff, byte for byte) and the recovery puts it back. The history records both names.
func TestRenameBetweenInvalidUTF8Names(t *testing.T) {
	e := newEnv(t, "")
	t.Run("shared", func(t *testing.T) {
		e.t = t
		e.session("s1")
		_, shared, _, err := e.ws.SessionPaths("a", "s1")
		if err != nil {
			t.Fatal(err)
		}
		writeName(t, shared, nameFE)
		st, err := e.start("s1", RunParams{Recovery: &rpc.Recovery{}}, true,
			"/bin/sh", "-c", renameFEtoFF, "sh", shared)
		if err != nil {
			t.Fatal(err)
		}
		eff := e.effects(st)
		if st.ExitCode != 0 || eff.Verdict != rpc.VerdictInconsistent || eff.Domains["shared"] != rpc.VerdictInconsistent || !eff.Fenced {
			t.Fatalf("run %+v effects %+v: want INCONSISTENT naming shared, and the session fenced", st, eff)
		}
		r := recoveryReport(t, eff)
		for _, tr := range []verdict.Transition{r.Run, r.Restored} {
			if got := changes(domainOf(tr, "shared").Changes); got != "removed f\xfe; added f\xff" {
				t.Errorf("%s→%s shared changes %q, want the rename", tr.From, tr.To, got)
			}
		}
		if _, err := e.start("s1", RunParams{}, false, "/bin/true"); err == nil || !strings.Contains(err.Error(), "require_consistent") {
			t.Errorf("next start = %v, want the fence's reason", err)
		}
		renamed(t, eff, nameFE, nameFF)
	})
	t.Run("workspace", func(t *testing.T) {
		e.t = t
		e.session("s2")
		current, _, _, err := e.ws.SessionPaths("a", "s2")
		if err != nil {
			t.Fatal(err)
		}
		writeName(t, current, nameFE)
		st, err := e.start("s2", RunParams{Recovery: &rpc.Recovery{}}, true,
			"/bin/sh", "-c", renameFEtoFF, "sh", ".")
		if err != nil {
			t.Fatal(err)
		}
		eff := e.effects(st)
		if st.ExitCode != 0 || eff.Verdict != rpc.VerdictConsistent || eff.Fenced {
			t.Fatalf("run %+v effects %+v: want CONSISTENT (recovered) and not fenced", st, eff)
		}
		if got := changes(recoveryReport(t, eff).Run.Effects); got != "removed f\xfe; added f\xff" {
			t.Errorf("A→B effects %q, want the rename", got)
		}
		if _, err := os.Lstat(filepath.Join(current, nameFE)); err != nil {
			t.Errorf("after the recovery: %v; want f\\xfe back", err)
		}
		if _, err := os.Lstat(filepath.Join(current, nameFF)); !os.IsNotExist(err) {
			t.Errorf("after the recovery: f\\xff: %v; want it gone", err)
		}
		renamed(t, eff, nameFE, nameFF)
	})
}

func writeName(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("same\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func recoveryReport(t *testing.T, eff rpc.Effects) verdict.RecoveryReport {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(eff.EvidencePath, evidence.RecoveryReportFile))
	if err != nil {
		t.Fatal(err)
	}
	var r verdict.RecoveryReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func domainOf(tr verdict.Transition, name string) verdict.Domain {
	for _, d := range tr.Domains {
		if d.Domain == name {
			return d
		}
	}
	return verdict.Domain{}
}

// changes renders the changes of names that begin with f as "kind key; …".
func changes(cs []verdict.Change) string {
	var s []string
	for _, c := range cs {
		if strings.HasPrefix(string(c.Key), "f") {
			s = append(s, c.Kind+" "+string(c.Key))
		}
	}
	return strings.Join(s, "; ")
}

// renamed checks that the run's history holds a rename syscall from oldpath to newpath, byte for
// byte.
func renamed(t *testing.T, eff rpc.Effects, oldpath, newpath string) {
	t.Helper()
	f, err := os.Open(filepath.Join(eff.EvidencePath, evidence.HistoryFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := history.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, ev := range evs {
		if ev.Kind == history.KindSyscall && strings.HasPrefix(ev.Syscall, "rename") {
			var strs []string
			for _, v := range ev.Strings {
				strs = append(strs, string(v))
			}
			seen = append(seen, ev.Syscall+" "+strings.Join(strs, " "))
			if string(ev.Strings["oldpath"]) == oldpath && string(ev.Strings["newpath"]) == newpath {
				return
			}
		}
	}
	t.Errorf("history has no rename %q → %q; renames: %q", oldpath, newpath, seen)
}
