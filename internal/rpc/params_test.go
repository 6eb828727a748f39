package rpc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type testParams struct {
	AgentID string `json:"agent_id"`
	Kill    bool   `json:"kill_processes,omitempty"`
	Count   int    `json:"count"`
	Ignored string `json:"-"`
	hidden  string //nolint:unused // unexported fields take no key
}

func TestDecodeParams(t *testing.T) {
	var got testParams
	if err := DecodeParams(json.RawMessage(`{"agent_id":"a","count":3,"kill_processes":true}`), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(testParams{AgentID: "a", Kill: true, Count: 3}, got, cmp.AllowUnexported(testParams{})); diff != "" {
		t.Errorf("DecodeParams mismatch (-want +got):\n%s", diff)
	}
	for _, raw := range []string{``, `null`, `{}`, ` { } `} {
		if err := DecodeParams(json.RawMessage(raw), &struct{}{}); err != nil {
			t.Errorf("DecodeParams(%q, no params) = %v, want nil", raw, err)
		}
	}
}

func TestDecodeParamsErrors(t *testing.T) {
	for _, tt := range []struct {
		name      string
		raw       string
		v         any
		field     string
		inMessage string
		choices   []string
	}{
		{"unknown field, no params", `{"verbose":true}`, &struct{}{}, "params.verbose", "takes no params", []string{}},
		{"first unknown field sorted", `{"zeta":1,"beta":2}`, &struct{}{}, "params.beta", `"beta"`, []string{}},
		{"unknown field lists allowed", `{"agent":"a"}`, &testParams{}, "params.agent", "use one of agent_id, count, kill_processes", []string{"agent_id", "count", "kill_processes"}},
		{"wrong case", `{"Agent_ID":"a"}`, &testParams{}, "params.Agent_ID", "unknown field", []string{"agent_id", "count", "kill_processes"}},
		{"dash tag is not a key", `{"Ignored":"a"}`, &testParams{}, "params.Ignored", "unknown field", []string{"agent_id", "count", "kill_processes"}},
		{"wrong type", `{"count":"3"}`, &testParams{}, "params.count", "must be an integer, not a JSON string", nil},
		{"not an object", `[1]`, &testParams{}, "params", "must be a JSON object", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := DecodeParams(json.RawMessage(tt.raw), tt.v)
			checkError(t, err, CodeInvalidParams, tt.field, tt.inMessage)
			if e, ok := err.(*Error); ok {
				if diff := cmp.Diff(tt.choices, e.Choices); diff != "" {
					t.Errorf("choices mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestDecodeParamsEmbedded(t *testing.T) {
	type Session struct {
		SessionID string `json:"session_id"`
	}
	type params struct {
		Session
		AgentID string `json:"agent_id"`
	}
	var p params
	if err := DecodeParams(json.RawMessage(`{"agent_id":"a","session_id":"s"}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.SessionID != "s" || p.AgentID != "a" {
		t.Errorf("got %+v", p)
	}
}

func TestDecodeParamsMap(t *testing.T) {
	var m map[string]any
	if err := DecodeParams(json.RawMessage(`{"anything":1}`), &m); err != nil {
		t.Errorf("DecodeParams into a map: %v", err)
	}
}

func TestDecodeParamsRefusesDuplicateKeys(t *testing.T) {
	type inner struct {
		Env  map[string]string `json:"env"`
		Argv []any             `json:"argv"`
	}
	for _, tt := range []struct{ name, raw, field string }{
		{"top level", `{"env":{},"env":{}}`, "params.env"},
		{"inside a map", `{"env":{"HOME":"a","X":"1","HOME":"b"}}`, "params.env.HOME"},
		{"escaped spelling", `{"env":{"a":"1","\u0061":"2"}}`, "params.env.a"},
		{"inside an array", `{"argv":["x",{"k":1,"k":2}]}`, "params.argv[1].k"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := DecodeParams(json.RawMessage(tt.raw), &inner{})
			checkError(t, err, CodeInvalidParams, tt.field, "given twice")
		})
	}
	var ok inner
	if err := DecodeParams(json.RawMessage(`{"env":{"a":"1","b":"2"},"argv":[{"k":1},{"k":2}]}`), &ok); err != nil {
		t.Errorf("the same key in sibling objects: %v, want accepted", err)
	}
	deep := strings.Repeat(`{"a":`, maxParamsDepth+2) + "1" + strings.Repeat("}", maxParamsDepth+2)
	checkError(t, DecodeParams(json.RawMessage(deep), &struct{}{}), CodeInvalidParams, "params", "deeper")
}
