package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/allox-os/allox/internal/atomicfile"
	"github.com/allox-os/allox/internal/limit"
)

// ErrInvalidLimits marks limits that session.create refuses: errors.Is(err, ErrInvalidLimits).
var ErrInvalidLimits = errors.New("invalid limits")

// LimitError names the limit at fault ("limits.memory_max") and the bound it broke.
type LimitError struct {
	Field  string
	Reason string
}

func (e *LimitError) Error() string { return e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalidLimits) true.
func (e *LimitError) Is(target error) bool { return target == ErrInvalidLimits }

// Limits are the sessions' resource limits: the image's defaults, overridable per session at
// creation within the image's maximum. The effective limits of each session are daemon state,
// persisted outside every workspace, so that they survive a restart and are applied again whenever
// the session's cgroup is re-created.
type Limits struct {
	// Defaults are every session's limits unless session.create overrides them; Max bounds the
	// overrides (an unset field: only the absolute bounds of limit.Set.Check).
	Defaults, Max limit.Set

	path string
	mu   sync.Mutex
	st   map[string]limit.Set // agent/session → effective limits
}

// OpenLimits loads the limits kept in stateDir.
func OpenLimits(stateDir string, defaults, max limit.Set) (*Limits, error) {
	l := &Limits{Defaults: defaults, Max: max, path: filepath.Join(stateDir, "session-limits.json"), st: map[string]limit.Set{}}
	data, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read session limits: %w", err)
	}
	if err := json.Unmarshal(data, &l.st); err != nil {
		return nil, fmt.Errorf("decode %s: %w", l.path, err)
	}
	if l.st == nil {
		l.st = map[string]limit.Set{}
	}
	return l, nil
}

// Resolve checks a session's overrides against the bounds and returns its effective limits: the
// defaults with the overrides applied. Errors name the field ("limits.memory_max") and the bound.
func (l *Limits) Resolve(over limit.Set) (limit.Set, error) {
	var errs []error
	for _, e := range append(over.Check(), over.Within(l.Max)...) {
		errs = append(errs, &LimitError{Field: "limits." + e.Field, Reason: e.Reason + boundHint(e.Field)})
	}
	if len(errs) > 0 {
		return limit.Set{}, errs[0] // one field at a time: the wire error names one field
	}
	return limit.Merge(l.Defaults, over), nil
}

func boundHint(field string) string {
	switch field {
	case limit.CPUWeight, limit.PidsMax:
		return "; ask for less, or raise max_limits in the image spec's sandbox block"
	}
	return "; ask for less (sizes in bytes), or raise max_limits in the image spec's sandbox block"
}

// Session returns a session's effective limits; a session created before limits were recorded
// gets the defaults.
func (l *Limits) Session(agent, session string) (limit.Set, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.st[agent+"/"+session]; ok {
		return s, nil
	}
	return l.Defaults, nil
}

// Set records a session's effective limits.
func (l *Limits) Set(agent, session string, s limit.Set) error {
	return l.update(func(st map[string]limit.Set) { st[agent+"/"+session] = s })
}

// Forget drops a deleted session's limits.
func (l *Limits) Forget(agent, session string) error {
	return l.update(func(st map[string]limit.Set) { delete(st, agent+"/"+session) })
}

func (l *Limits) update(change func(map[string]limit.Set)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := maps.Clone(l.st)
	change(next)
	data, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(l.path, data, 0o600); err != nil {
		return fmt.Errorf("write session limits: %w", err)
	}
	l.st = next
	return nil
}
