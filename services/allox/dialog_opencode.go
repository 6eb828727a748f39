package main

import (
	"cmp"
	"encoding/json"
	"fmt"
)

// opencodeHook answers for the Probe's opencode plugin, which runs "allox dialog hook opencode"
// from its "tool.execute.before" hook for each tool call. It reads the call as JSON on stdin
// ({"tool", "sessionID", "callID", "args"}), asks for permission to use the tool, and writes
// {"decision": "allow"|"deny", "reason": ...}. opencode's one-shot run has no prompt of its own
// to fall back to, so a dialog that cannot be asked denies.
func opencodeHook(c *caller, dec *json.Decoder, ask askFunc) error {
	var in struct {
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	}
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("dialog hook opencode: the tool call on stdin is not JSON: %w", err)
	}
	if in.Tool == "" {
		return fmt.Errorf(`dialog hook opencode: the tool call on stdin names no "tool": give {"tool": NAME, "args": {...}}`)
	}
	decision, reason, _ := ask(fmt.Sprintf("opencode wants to use %s: %s", in.Tool, summarize(in.Args)), "opencode tool.execute.before")
	if decision == "" {
		decision, reason = "deny", cmp.Or(reason, "no answer through the dialog")
	}
	return json.NewEncoder(c.stdout).Encode(map[string]string{"decision": decision, "reason": reason})
}
