package dialog

import (
	"errors"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

func TestQuestionCheck(t *testing.T) {
	ok := Question{Kind: KindPermission, Prompt: "p", Default: "deny"}
	if _, err := ok.check(); err != nil || strings.Join(ok.Options, ",") != "allow,deny" {
		t.Fatalf("a permission request: %v, options %q; want allow,deny", err, ok.Options)
	}
	for _, tc := range []struct {
		q     Question
		field string
	}{
		{Question{Kind: "poll", Prompt: "p", Default: "x"}, "params.kind"},
		{Question{Kind: KindQuestion, Default: "x"}, "params.prompt"},
		{Question{Kind: KindQuestion, Prompt: strings.Repeat("x", MaxPrompt+1), Default: "x"}, "params.prompt"},
		{Question{Kind: KindQuestion, Prompt: "p", Options: []string{"a", "a"}, Default: "a"}, "params.options"},
		{Question{Kind: KindQuestion, Prompt: "p", Options: []string{"a", ""}, Default: "a"}, "params.options"},
		{Question{Kind: KindPermission, Prompt: "p", Default: "maybe"}, "params.default"},
		{Question{Kind: KindQuestion, Prompt: "p"}, "params.default"},
		{Question{Kind: KindQuestion, Prompt: "p", Default: "x", Timeout: -1}, "params.timeout"},
		{Question{Kind: KindQuestion, Prompt: "p", Default: "x", Timeout: 3601}, "params.timeout"},
	} {
		_, err := tc.q.check()
		var re *rpc.Error
		if !errors.As(err, &re) || re.Field != tc.field {
			t.Errorf("%+v: %v; want a refusal naming %s", tc.q, err, tc.field)
		}
	}
}
