package evidence

import (
	"fmt"
	"slices"
	"strings"
)

// Snapshot is one domain's state at one capture point.
//
// Either Unconfirmable is set (the state could not be established, and why)
// or Items is the complete state. Excluded documents what the domain leaves
// out on purpose (e.g. sysctl keys that change by themselves); Note states a
// definite fact about the domain (e.g. "no module support").
type Snapshot struct {
	Domain        string   `json:"domain"`
	Point         string   `json:"point"`
	Unconfirmable string   `json:"unconfirmable,omitempty"`
	Note          string   `json:"note,omitempty"`
	Excluded      []string `json:"excluded,omitempty"`
	Items         []Item   `json:"items"`
}

// Item is one element of a domain's state: a stable identity and a
// canonical one-line description of everything compared about it.
type Item struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Unconfirmed returns a snapshot that records why the domain's state could
// not be established.
func Unconfirmed(domain, point, reason string) *Snapshot {
	return &Snapshot{Domain: domain, Point: point, Unconfirmable: reason, Items: []Item{}}
}

// Canonicalize sorts the items by key and fails on a duplicate key, which
// would make the snapshot ambiguous.
func (s *Snapshot) Canonicalize() error {
	if s.Items == nil {
		s.Items = []Item{}
	}
	slices.SortFunc(s.Items, func(a, b Item) int { return strings.Compare(a.Key, b.Key) })
	for i := 1; i < len(s.Items); i++ {
		if s.Items[i].Key == s.Items[i-1].Key {
			return fmt.Errorf("BUG: %s snapshot has key %q twice", s.Domain, s.Items[i].Key)
		}
	}
	slices.Sort(s.Excluded)
	return nil
}

// History is the history recorder's summary, written as history.json.
// The evidence is incomplete when the recorder dropped events, reported
// its history incomplete, or Unavailable says why no history was recorded.
type History struct {
	Events      uint64 `json:"events"`
	Dropped     uint64 `json:"dropped"`
	Incomplete  bool   `json:"incomplete,omitempty"`
	Unavailable string `json:"unavailable,omitempty"`
}

// Manifest lists every file of a closed set with its sha256.
type Manifest struct {
	Files []ManifestEntry `json:"files"`
}

// ManifestEntry is one file of a set.
type ManifestEntry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}
