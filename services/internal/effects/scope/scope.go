// Package scope reads the system-effects scope file: which domains beyond the
// Session Workspace and the agent's shared/ tree an observer captures.
//
// The scope file is JSON; unknown keys are an error. Every key is optional:
//
//	{
//	  "paths":     ["/etc", "/usr/local"],     // absolute trees outside the workspace, walked like it
//	  "sysctl":    ["net.", "kernel.hostname"], // or "all"; an entry ending in "." is a prefix,
//	                                            // any other entry names a key and its subtree
//	  "bpf":       true,                        // BPF programs, maps and links
//	  "mounts":    true,                        // /proc/1/mountinfo
//	  "network":   true,                        // links, addresses, routes, rules and nftables
//	  "modules":   true,                        // /proc/modules
//	  "processes": true                         // processes left in the session cgroup subtree
//	}
//
// Without a scope file only the two always-captured domains are taken:
// the Session Workspace and the agent's shared/ tree.
package scope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Domain names. Each is one file per capture point in an evidence set.
const (
	Workspace = "workspace" // the Session Workspace (current/); always
	Shared    = "shared"    // the agent's shared/; always
	Paths     = "paths"     // Scope.Paths
	Sysctl    = "sysctl"
	BPF       = "bpf"
	Mounts    = "mounts"
	Network   = "network"   // links, addresses, routes, routing rules
	Netfilter = "netfilter" // nftables tables, chains, rules, sets; with "network"
	Modules   = "modules"
	Processes = "processes"
)

// ErrInvalid marks a scope file that cannot be used.
var ErrInvalid = errors.New("invalid scope")

// Scope is a decoded scope file.
type Scope struct {
	Paths     []string `json:"paths,omitempty"`
	Sysctl    *Keys    `json:"sysctl,omitempty"`
	BPF       bool     `json:"bpf,omitempty"`
	Mounts    bool     `json:"mounts,omitempty"`
	Network   bool     `json:"network,omitempty"`
	Modules   bool     `json:"modules,omitempty"`
	Processes bool     `json:"processes,omitempty"`
}

// Keys selects sysctl keys: All, or the keys matching Prefixes.
type Keys struct {
	All      bool
	Prefixes []string
}

// MarshalJSON writes "all" or the list of prefixes.
func (s Keys) MarshalJSON() ([]byte, error) {
	if s.All {
		return []byte(`"all"`), nil
	}
	return json.Marshal(s.Prefixes)
}

// UnmarshalJSON reads "all" or a list of keys and prefixes.
func (s *Keys) UnmarshalJSON(b []byte) error {
	var all string
	if err := json.Unmarshal(b, &all); err == nil {
		if all != "all" {
			return fmt.Errorf("sysctl %q: use \"all\" or a list such as [\"net.\", \"kernel.hostname\"]", all)
		}
		*s = Keys{All: true}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("sysctl: use \"all\" or a list of keys and prefixes: %w", err)
	}
	for _, k := range list {
		if k == "" || strings.ContainsAny(k, "/ ") || strings.HasPrefix(k, ".") {
			return fmt.Errorf("sysctl entry %q: use dotted names such as \"net.\" or \"kernel.hostname\"", k)
		}
	}
	*s = Keys{Prefixes: list}
	return nil
}

// Match reports whether the dotted sysctl key is selected.
func (s *Keys) Match(key string) bool {
	if s == nil {
		return false
	}
	if s.All {
		return true
	}
	for _, p := range s.Prefixes {
		if strings.HasSuffix(p, ".") && strings.HasPrefix(key, p) ||
			key == p || strings.HasPrefix(key, p+".") {
			return true
		}
	}
	return false
}

// Parse decodes and validates a scope file.
func Parse(r io.Reader) (*Scope, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Scope
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the scope object", ErrInvalid)
	}
	for i, p := range s.Paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return nil, fmt.Errorf("%w: paths[%d] %q: must be a clean absolute path, e.g. \"/etc\"", ErrInvalid, i, p)
		}
		if p == "/proc" || p == "/sys" || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/") {
			return nil, fmt.Errorf("%w: paths[%d] %q: kernel pseudo-files are not a tree to hash; use the sysctl, mounts or modules domains", ErrInvalid, i, p)
		}
	}
	slices.Sort(s.Paths)
	for i := 1; i < len(s.Paths); i++ {
		if within(s.Paths[i], s.Paths[i-1]) {
			return nil, fmt.Errorf("%w: paths: %q is inside %q; list the outer path only", ErrInvalid, s.Paths[i], s.Paths[i-1])
		}
	}
	return &s, nil
}

// Load reads the scope file at path.
func Load(path string) (*Scope, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scope file: %w", err)
	}
	s, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("scope file %s: %w", path, err)
	}
	return s, nil
}

// Domains lists the domains captured under s, in a fixed order. A nil scope
// captures the workspace and shared/ only.
func (s *Scope) Domains() []string {
	d := []string{Workspace, Shared}
	if s == nil {
		return d
	}
	add := func(on bool, names ...string) {
		if on {
			d = append(d, names...)
		}
	}
	add(len(s.Paths) > 0, Paths)
	add(s.Sysctl != nil, Sysctl)
	add(s.BPF, BPF)
	add(s.Mounts, Mounts)
	add(s.Network, Network, Netfilter)
	add(s.Modules, Modules)
	add(s.Processes, Processes)
	return d
}

// Overlap returns an error if a scope path lies inside (or contains) the
// workspace or shared/: those trees are their own domains.
func (s *Scope) Overlap(workspace, shared string) error {
	if s == nil {
		return nil
	}
	for i, p := range s.Paths {
		for _, w := range []string{workspace, shared} {
			if within(p, w) || within(w, p) {
				return fmt.Errorf("%w: paths[%d] %q overlaps %q; the workspace and shared/ are captured on their own", ErrInvalid, i, p, w)
			}
		}
	}
	return nil
}

func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
