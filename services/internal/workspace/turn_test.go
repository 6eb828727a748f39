package workspace

import (
	"errors"
	"strings"
	"testing"

	"github.com/allox-os/allox/services/internal/store"
)

func TestCheckTurnID(t *testing.T) {
	for _, tt := range []struct {
		id string
		ok bool
	}{
		{"1", true},
		{"turn-7.b_c", true},
		{strings.Repeat("a", MaxTurnIDLen), true},
		{"", false},
		{strings.Repeat("a", MaxTurnIDLen+1), false}, // turn-<id> would exceed the checkpoint id limit
		{"Upper", false},
		{"a b", false},
		{"-lead", false},
		{".hidden", false},
		{"a/b", false},
	} {
		err := CheckTurnID("turn.begin", tt.id)
		var se *store.Error
		switch {
		case tt.ok && err != nil:
			t.Errorf("CheckTurnID(%q) = %v, want accepted", tt.id, err)
		case !tt.ok && (!errors.As(err, &se) || se.Field != "turn_id" || !errors.Is(err, store.ErrInvalidID)):
			t.Errorf("CheckTurnID(%q) = %v, want an invalid-id error naming turn_id", tt.id, err)
		}
	}
}
