package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCheckLabels(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	full := map[string]string{}
	for i := range MaxLabels {
		full[fmt.Sprintf("k%02d", i)+strings.Repeat("x", MaxLabelKeyLen-3)] = strings.Repeat("v", MaxLabelValueLen)
	}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		hint   string // "" = accepted
	}{
		{"none", nil, ""},
		{"the daemon's own", map[string]string{"allox.kind": "turn", "allox.turn": "7"}, ""},
		{"at every bound", full, ""},
		{"too many", many, "at most 32 labels"},
		{"key too long", map[string]string{strings.Repeat("k", MaxLabelKeyLen+1): "v"}, "at most 64 bytes"},
		{"empty key", map[string]string{"": "v"}, "must not be empty"},
		{"key alphabet", map[string]string{"a b": "v"}, "use only letters"},
		{"key leading dot", map[string]string{".a": "v"}, "must start with"},
		{"value too long", map[string]string{"a": strings.Repeat("v", MaxLabelValueLen+1)}, "at most 1024 bytes"},
		{"value not UTF-8", map[string]string{"a": "\xff"}, "UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkLabels("checkpoint.create", tt.labels)
			var se *Error
			switch {
			case tt.hint == "" && err != nil:
				t.Errorf("checkLabels = %v, want accepted", err)
			case tt.hint != "" && (!errors.As(err, &se) || se.Field != "labels" || !errors.Is(err, ErrInvalidLabel) || !strings.Contains(err.Error(), tt.hint)):
				t.Errorf("checkLabels = %v, want an ErrInvalidLabel on labels saying %q", err, tt.hint)
			}
		})
	}
}
