package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// agent.create's "shared" through the daemon: "rw" is reported by agent.get and lets the agent's
// process.start runs write shared/, the default is "ro" (EROFS in runs), anything else is refused
// naming the field, creating nothing.
func TestAgentSharedOverRPC(t *testing.T) {
	url := daemonOn(t, build(t), btrfsRoot(t))
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"w","shared":"rw"}}`)
	mustPost(t, url, `{"action":"agent.create","params":{"agent_id":"r"}}`)
	for agent, want := range map[string]string{"w": "rw", "r": "ro"} {
		var a rpc.Agent
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"agent.get","params":{"agent_id":"`+agent+`"}}`), &a))
		if a.SharedMode != want {
			t.Errorf("agent.get %s: shared_mode %q, want %q", agent, a.SharedMode, want)
		}
	}
	_, rerr := post(t, url, `{"action":"agent.create","params":{"agent_id":"x","shared":"write"}}`)
	if rerr == nil || rerr.Code != rpc.CodeInvalidParams || rerr.Field != "params.shared" || !strings.Contains(rerr.Message, `"rw"`) {
		t.Errorf("shared \"write\": %+v, want invalid_params on params.shared naming the choices", rerr)
	}
	if _, rerr := post(t, url, `{"action":"agent.get","params":{"agent_id":"x"}}`); rerr == nil || rerr.Code != rpc.CodeNotFound {
		t.Errorf("a refused agent.create made the agent: %+v", rerr)
	}

	for agent, wantOK := range map[string]bool{"w": true, "r": false} {
		mustPost(t, url, `{"action":"session.create","params":{"agent_id":"`+agent+`","session_id":"s","turn_checkpoints":false}}`)
		var r rpc.Run
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.start","params":{"agent_id":"`+agent+`","session_id":"s","argv":["/bin/sh","-c","echo x > \"$ALLOX_AGENT_SHARED/f\""]}}`), &r))
		must(t, json.Unmarshal(mustPost(t, url, `{"action":"process.wait","params":{"run_id":"`+r.RunID+`"}}`), &r))
		if r.ExitCode == nil || (*r.ExitCode == 0) != wantOK {
			t.Errorf("agent %s: a run's write to shared/ ended %+v, want success %v", agent, r, wantOK)
		}
	}
}
