package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agext/levenshtein"
)

// closest returns the option nearest to given in edit distance, or "" when none is near enough to
// be a plausible typo: HCL's own threshold (fewer than 3 edits), loosened for long names and
// tightened for names so short that every option would be "near".
func closest(given string, options []string) string {
	best, bestDist := "", 0
	for _, o := range options {
		dist := levenshtein.Distance(given, o, nil)
		if best == "" || dist < bestDist {
			best, bestDist = o, dist
		}
	}
	if best == "" || bestDist >= max(3, len(given)/3) || bestDist >= len(given) {
		return ""
	}
	return best
}

// didYouMean formats closest as the tail of a diagnostic detail, or returns "".
func didYouMean(given string, options []string) string {
	if s := closest(given, options); s != "" {
		return fmt.Sprintf(" Did you mean %q?", s)
	}
	return ""
}

// siblingHint suggests the entry of path's directory whose name is nearest to path's own, for a
// path that does not exist. It walks up to the first directory that does exist.
func siblingHint(path string) string {
	dir, name := filepath.Split(filepath.Clean(path))
	if name == "" {
		return ""
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if parent := filepath.Clean(dir); parent != path && parent != filepath.Dir(parent) {
			return siblingHint(parent)
		}
		return ""
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if s := closest(name, names); s != "" {
		return fmt.Sprintf(" Did you mean %q?", filepath.Join(dir, s))
	}
	return ""
}

// quoteList renders options as "a", "b" or "c".
func quoteList(options []string) string {
	q := make([]string, len(options))
	for i, o := range options {
		q[i] = fmt.Sprintf("%q", o)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// hclList renders elems as an HCL list literal: ["a", "b"].
func hclList(elems []string) string {
	q := make([]string, len(elems))
	for i, e := range elems {
		q[i] = fmt.Sprintf("%q", e)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
