package daemon

import (
	"errors"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

func TestTimeoutParam(t *testing.T) {
	for _, tt := range []struct {
		secs float64
		want time.Duration
		bad  bool
	}{
		{0, 0, false},
		{1.5, 1500 * time.Millisecond, false},
		{1e-9, time.Nanosecond, false},
		{604800, 168 * time.Hour, false},
		{-1, 0, true},
		{1e-12, 0, true},    // rounds to no timeout at all
		{604800.5, 0, true}, // beyond 168 h
		{1e300, 0, true},    // would overflow into a negative duration
	} {
		got, err := timeoutParam(tt.secs)
		var re *rpc.Error
		switch {
		case tt.bad && (!errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || re.Field != "params.timeout"):
			t.Errorf("timeoutParam(%g) = %v, %v; want invalid_params naming params.timeout", tt.secs, got, err)
		case !tt.bad && (err != nil || got != tt.want):
			t.Errorf("timeoutParam(%g) = %v, %v; want %v", tt.secs, got, err, tt.want)
		}
	}
}
