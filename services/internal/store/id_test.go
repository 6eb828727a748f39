package store

import (
	"errors"
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"session-1", true},
		{"0.9_x-y", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"-x", false},
		{"a/b", false},
		{"../x", false},
		{"a\x00b", false},
		{"Agent", false},
		{"a b", false},
		{"é", false},
	} {
		if got := validID(tc.id) == ""; got != tc.ok {
			t.Errorf("validID(%q) ok = %v, want %v (%s)", tc.id, got, tc.ok, validID(tc.id))
		}
	}
}

func TestCheckIDError(t *testing.T) {
	err := checkID("session.create", "session_id", "a/b")
	if !errors.Is(err, ErrInvalidID) {
		t.Fatalf("err = %v, want ErrInvalidID", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Field != "session_id" {
		t.Fatalf("err = %#v, want *Error naming session_id", err)
	}
	for _, want := range []string{"session_id", `"a/b"`, "'/'", "[a-z0-9]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not mention %s", err, want)
		}
	}
}
