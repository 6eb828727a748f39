package verdict

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/jsonbytes"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// Verdicts and evidence states.
const (
	Consistent   = "CONSISTENT"
	Inconclusive = "INCONCLUSIVE"
	Inconsistent = "INCONSISTENT"

	Complete   = "COMPLETE"
	Incomplete = "INCOMPLETE"
)

// Change kinds.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// noteKey is the pseudo item under which a change of a snapshot's Note or
// Excluded list is reported.
const noteKey = "(snapshot note)"

// Change is one item that differs between two points. In a report its key
// and values are in their jsonbytes form, as in the evidence.
type Change struct {
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

// changeJSON is a Change as a report holds it.
type changeJSON struct {
	Kind   string           `json:"kind"`
	Key    jsonbytes.String `json:"key"`
	Before jsonbytes.String `json:"before,omitempty"`
	After  jsonbytes.String `json:"after,omitempty"`
}

// MarshalJSON writes c with its key and values in their jsonbytes form.
func (c Change) MarshalJSON() ([]byte, error) {
	return json.Marshal(changeJSON{Kind: c.Kind, Key: jsonbytes.String(c.Key),
		Before: jsonbytes.String(c.Before), After: jsonbytes.String(c.After)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Change) UnmarshalJSON(b []byte) error {
	var w changeJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*c = Change{Kind: w.Kind, Key: string(w.Key), Before: string(w.Before), After: string(w.After)}
	return nil
}

// Domain is one domain's verdict for one transition.
type Domain struct {
	Domain  string   `json:"domain"`
	Verdict string   `json:"verdict"`
	Reason  string   `json:"reason,omitempty"`
	Changes []Change `json:"changes,omitempty"`
}

// Transition compares two capture points.
type Transition struct {
	From    string   `json:"from"`
	To      string   `json:"to"`
	Verdict string   `json:"verdict"`
	Domains []Domain `json:"domains"`
	// Effects are the Session Workspace changes of a transition in which
	// the workspace is expected to change.
	Effects []Change `json:"effects,omitempty"`
}

// worse returns the more severe of two verdicts.
func worse(a, b string) string {
	rank := map[string]int{Consistent: 0, Inconclusive: 1, Inconsistent: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// Compare judges every domain of the header between two points.
// workspaceMayChange makes the Session Workspace's changes Effects.
func Compare(ev *evidence.Evidence, from, to string, workspaceMayChange bool) Transition {
	t := Transition{From: from, To: to, Verdict: Consistent, Domains: []Domain{}}
	if ev.Header == nil {
		t.Verdict = Inconclusive
		return t
	}
	residue := from == evidence.PointA && to == evidence.PointB && ev.Residue != nil
	judged := false
	for _, name := range ev.Header.Domains {
		later := ev.Snapshot(to, name)
		if name == scope.Processes && residue {
			later, judged = withResidue(later, ev.Residue), true
		}
		d := compareDomain(name, ev.Snapshot(from, name), later, from, to)
		if name == scope.Workspace && workspaceMayChange && d.Verdict == Inconsistent {
			t.Effects = d.Changes
			d = Domain{Domain: name, Verdict: Consistent,
				Reason: fmt.Sprintf("expected to change: %d changes reported as effects", len(d.Changes))}
		}
		t.Verdict = worse(t.Verdict, d.Verdict)
		t.Domains = append(t.Domains, d)
	}
	if residue && !judged {
		// Without the processes domain there is no A to compare with:
		// every process recorded as left behind is a residue.
		d := compareDomain(scope.Processes, &evidence.Snapshot{}, ev.Residue, from, evidence.PointResidue)
		t.Verdict = worse(t.Verdict, d.Verdict)
		t.Domains = append(t.Domains, d)
	}
	return t
}

// withResidue merges the residue into the processes snapshot at B: the
// processes a managed run left behind were killed before B, and are its
// residue all the same.
func withResidue(b, residue *evidence.Snapshot) *evidence.Snapshot {
	if b == nil || b.Unconfirmable != "" {
		return b
	}
	if residue.Unconfirmable != "" {
		return residue
	}
	m := *b
	m.Items = append(append([]evidence.Item(nil), b.Items...), residue.Items...)
	slices.SortFunc(m.Items, func(x, y evidence.Item) int { return strings.Compare(x.Key, y.Key) })
	m.Items = slices.CompactFunc(m.Items, func(x, y evidence.Item) bool { return x.Key == y.Key })
	return &m
}

func compareDomain(name string, a, b *evidence.Snapshot, from, to string) Domain {
	d := Domain{Domain: name, Verdict: Consistent}
	switch {
	case a == nil || b == nil:
		d.Verdict, d.Reason = Inconclusive, fmt.Sprintf("snapshot missing at %s", missing(a, b, from, to))
		return d
	case a.Unconfirmable != "":
		d.Verdict, d.Reason = Inconclusive, fmt.Sprintf("unconfirmable at %s: %s", from, a.Unconfirmable)
		return d
	case b.Unconfirmable != "":
		d.Verdict, d.Reason = Inconclusive, fmt.Sprintf("unconfirmable at %s: %s", to, b.Unconfirmable)
		return d
	}
	d.Changes = Diff(a, b)
	counted := 0
	for _, c := range d.Changes {
		if name != scope.Processes || c.Kind == Added {
			counted++
		}
	}
	if counted > 0 {
		d.Verdict = Inconsistent
		d.Reason = fmt.Sprintf("%d items differ", counted)
		if name == scope.Processes {
			d.Reason = fmt.Sprintf("%d residual processes", counted)
		}
	}
	return d
}

func missing(a, b *evidence.Snapshot, from, to string) string {
	switch {
	case a == nil && b == nil:
		return from + " and " + to
	case a == nil:
		return from
	}
	return to
}

// Diff lists the items added, removed and changed from a to b, in key
// order, and a change of the snapshots' note or exclusions. Both
// snapshots must be canonical (sorted by key).
func Diff(a, b *evidence.Snapshot) []Change {
	var out []Change
	if a.Note != b.Note || fmt.Sprint(a.Excluded) != fmt.Sprint(b.Excluded) {
		out = append(out, Change{Kind: Changed, Key: noteKey,
			Before: fmt.Sprintf("%s excluded=%v", a.Note, a.Excluded), After: fmt.Sprintf("%s excluded=%v", b.Note, b.Excluded)})
	}
	i, j := 0, 0
	for i < len(a.Items) || j < len(b.Items) {
		switch {
		case j == len(b.Items) || i < len(a.Items) && a.Items[i].Key < b.Items[j].Key:
			out = append(out, Change{Kind: Removed, Key: a.Items[i].Key, Before: a.Items[i].Value})
			i++
		case i == len(a.Items) || b.Items[j].Key < a.Items[i].Key:
			out = append(out, Change{Kind: Added, Key: b.Items[j].Key, After: b.Items[j].Value})
			j++
		default:
			if a.Items[i].Value != b.Items[j].Value {
				out = append(out, Change{Kind: Changed, Key: a.Items[i].Key, Before: a.Items[i].Value, After: b.Items[j].Value})
			}
			i++
			j++
		}
	}
	return out
}
