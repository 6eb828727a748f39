package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// Bounds on a checkpoint's labels. Labels live in the index, which every operation rewrites, so
// they stay small: at most MaxLabels per checkpoint, keys of at most MaxLabelKeyLen bytes from a
// safe alphabet, values of at most MaxLabelValueLen bytes of UTF-8.
const (
	MaxLabels        = 32
	MaxLabelKeyLen   = 64
	MaxLabelValueLen = 1024
)

// ErrInvalidLabel is matched (errors.Is) by the error for labels beyond the bounds.
var ErrInvalidLabel = errors.New("invalid label")

// checkLabels returns an *Error naming the labels field when labels exceed the bounds.
func checkLabels(op string, labels map[string]string) error {
	bad := func(id, format string, args ...any) error {
		return &Error{Op: op, Field: "labels", ID: id, Err: ErrInvalidLabel, Hint: fmt.Sprintf(format, args...)}
	}
	if len(labels) > MaxLabels {
		return bad(fmt.Sprintf("%d labels", len(labels)), "a checkpoint has at most %d labels; keep bulky data in a file of the workspace and label it with its name", MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if why := labelKey(k); why != "" {
			return bad(k, "a label key %s (pattern [A-Za-z0-9][A-Za-z0-9._/-]{0,%d}, e.g. \"allox.kind\")", why, MaxLabelKeyLen-1)
		}
		v := labels[k]
		switch {
		case len(v) > MaxLabelValueLen:
			return bad(k, "the value is %d bytes; a label value is at most %d bytes: keep bulky data in a file of the workspace", len(v), MaxLabelValueLen)
		case !utf8.ValidString(v):
			return bad(k, "the value is not valid UTF-8")
		}
	}
	return nil
}

func labelKey(k string) string {
	switch {
	case k == "":
		return "must not be empty"
	case len(k) > MaxLabelKeyLen:
		return fmt.Sprintf("is at most %d bytes, not %d", MaxLabelKeyLen, len(k))
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return fmt.Sprintf("must start with a letter or digit, not %q", c)
		}
		if !alnum && c != '.' && c != '_' && c != '-' && c != '/' {
			return fmt.Sprintf("has %q at byte %d; use only letters, digits, '.', '_', '-' and '/'", c, i)
		}
	}
	return ""
}

// CheckLabels applies the checkpoint labels' bounds to other labels the daemon keeps (a turn's):
// it returns an *Error naming the labels field.
func CheckLabels(op string, labels map[string]string) error { return checkLabels(op, labels) }
