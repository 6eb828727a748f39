// Package limit is the contract between mkimage, which renders the image spec's sandbox block into
// the workspace daemon's command line, and the daemon, which parses it: the four cgroup v2 limits of
// a session or a run, their bounds, the size syntax and the flag syntax.
package limit

import (
	"fmt"
	"strconv"
	"strings"
)

// Set is one set of limits. A zero field is not set (no limit of its own); MemorySwapMax is a
// pointer because 0 ("no swap") is a limit.
type Set struct {
	PidsMax       int64  `json:"pids_max,omitempty"`        // pids.max
	MemoryMax     int64  `json:"memory_max,omitempty"`      // memory.max, bytes
	MemorySwapMax *int64 `json:"memory_swap_max,omitempty"` // memory.swap.max, bytes
	CPUWeight     int64  `json:"cpu_weight,omitempty"`      // cpu.weight, 1..10000
}

// Field names, as in the spec, the flags and the RPC params, in this order everywhere.
const (
	PidsMax       = "pids_max"
	MemoryMax     = "memory_max"
	MemorySwapMax = "memory_swap_max"
	CPUWeight     = "cpu_weight"
)

// Fields lists the field names in order.
var Fields = []string{PidsMax, MemoryMax, MemorySwapMax, CPUWeight}

// Bounds of every field, whatever the spec says: fewer pids than MinPids or less memory than
// MinMemory cannot start a sandbox (bwrap, a shell and a command), and cpu.weight is the
// kernel's range.
const (
	MinPids      = 16
	MaxPids      = 4194304 // PID_MAX_LIMIT on 64-bit
	MinMemory    = 16 << 20
	MinCPUWeight = 1
	MaxCPUWeight = 10000
)

// Int64 returns a pointer to v, for MemorySwapMax.
func Int64(v int64) *int64 { return &v }

// IsZero reports whether no field is set.
func (s Set) IsZero() bool { return s == Set{} }

// Get returns the value of the named field and whether it is set.
func (s Set) Get(field string) (int64, bool) {
	switch field {
	case PidsMax:
		return s.PidsMax, s.PidsMax != 0
	case MemoryMax:
		return s.MemoryMax, s.MemoryMax != 0
	case MemorySwapMax:
		if s.MemorySwapMax == nil {
			return 0, false
		}
		return *s.MemorySwapMax, true
	case CPUWeight:
		return s.CPUWeight, s.CPUWeight != 0
	}
	return 0, false
}

// with returns s with the named field set to v.
func (s Set) with(field string, v int64) Set {
	switch field {
	case PidsMax:
		s.PidsMax = v
	case MemoryMax:
		s.MemoryMax = v
	case MemorySwapMax:
		s.MemorySwapMax = Int64(v)
	case CPUWeight:
		s.CPUWeight = v
	}
	return s
}

// Merge returns base with every field that over sets replaced by over's value.
func Merge(base, over Set) Set {
	for _, f := range Fields {
		if v, ok := over.Get(f); ok {
			base = base.with(f, v)
		}
	}
	return base
}

// Cap returns a run's limits: run, with each bound the session sets (pids, memory, swap) lowered
// to the session's. cpu.weight is not capped: a run's weight is relative to the other runs of its
// session, the session's to the other sessions.
func Cap(run, session Set) Set {
	for _, f := range []string{PidsMax, MemoryMax, MemorySwapMax} {
		sv, ok := session.Get(f)
		if !ok {
			continue
		}
		if rv, rok := run.Get(f); !rok || rv > sv {
			run = run.with(f, sv)
		}
	}
	return run
}

// FieldError names the field at fault and how to fix it.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Check returns an error for each set field outside its range, in field order.
func (s Set) Check() []*FieldError {
	var errs []*FieldError
	bad := func(f, format string, args ...any) {
		errs = append(errs, &FieldError{Field: f, Reason: fmt.Sprintf(format, args...)})
	}
	if v, ok := s.Get(PidsMax); ok && (v < MinPids || v > MaxPids) {
		bad(PidsMax, "%d is outside %d..%d: a sandbox needs at least %d processes", v, MinPids, MaxPids, MinPids)
	}
	if v, ok := s.Get(MemoryMax); ok && v < MinMemory {
		bad(MemoryMax, "%s is below the minimum of %s: a sandbox cannot start in less; use e.g. \"512MiB\"", FormatSize(v), FormatSize(MinMemory))
	}
	if v, ok := s.Get(MemorySwapMax); ok && v < 0 {
		bad(MemorySwapMax, "%d is negative: use 0 for no swap or a size such as \"1GiB\"", v)
	}
	if v, ok := s.Get(CPUWeight); ok && (v < MinCPUWeight || v > MaxCPUWeight) {
		bad(CPUWeight, "%d is outside %d..%d (the kernel's cpu.weight range; 100 is the default)", v, MinCPUWeight, MaxCPUWeight)
	}
	return errs
}

// Within returns an error for each field that s sets above the bound max sets, in field order.
func (s Set) Within(max Set) []*FieldError {
	var errs []*FieldError
	for _, f := range Fields {
		v, ok := s.Get(f)
		m, mok := max.Get(f)
		if ok && mok && v > m {
			errs = append(errs, &FieldError{Field: f, Reason: fmt.Sprintf("%s exceeds the maximum %s", format(f, v), format(f, m))})
		}
	}
	return errs
}

func format(field string, v int64) string {
	if field == MemoryMax || field == MemorySwapMax {
		return FormatSize(v)
	}
	return strconv.FormatInt(v, 10)
}

// String is the flag form: the set fields as name=value, comma-separated, in field order, sizes in
// bytes ("pids_max=1024,memory_max=2147483648,memory_swap_max=0,cpu_weight=100").
func (s Set) String() string {
	var parts []string
	for _, f := range Fields {
		if v, ok := s.Get(f); ok {
			parts = append(parts, f+"="+strconv.FormatInt(v, 10))
		}
	}
	return strings.Join(parts, ",")
}

// Parse reads the flag form; sizes may also be written "512MiB" or "4GiB". It checks the syntax,
// not the ranges (see Check).
func Parse(s string) (Set, error) {
	var out Set
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Set{}, fmt.Errorf("%q is not name=value: write e.g. pids_max=1024,memory_max=2GiB", part)
		}
		if !contains(Fields, name) {
			return Set{}, fmt.Errorf("unknown limit %q: use %s", name, strings.Join(Fields, ", "))
		}
		if seen[name] {
			return Set{}, fmt.Errorf("%s is given twice: keep one", name)
		}
		seen[name] = true
		var v int64
		var err error
		if name == MemoryMax || name == MemorySwapMax {
			v, err = ParseSize(val)
		} else {
			v, err = strconv.ParseInt(val, 10, 64)
		}
		if err != nil {
			return Set{}, fmt.Errorf("%s=%s: %w", name, val, err)
		}
		if v == 0 && name != MemorySwapMax {
			return Set{}, fmt.Errorf("%s=0 is not a limit: leave %s out for no limit of its own", name, name)
		}
		out = out.with(name, v)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
