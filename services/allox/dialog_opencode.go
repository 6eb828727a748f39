package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/allox-os/allox/internal/rpc"
)

// dialogHookOpencode is "allox dialog hook opencode [--default allow|deny] [--timeout S]": what
// the Probe's opencode plugin runs from its "tool.execute.before" hook for each tool call. It
// reads the call as JSON on stdin ({"tool", "sessionID", "callID", "args"}), asks for permission
// to use the tool, and writes {"decision": "allow"|"deny", "reason": ...}. opencode's one-shot
// run has no prompt of its own to fall back to, so a dialog that cannot be asked denies.
func dialogHookOpencode(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	fs := flag.NewFlagSet("allox dialog hook opencode", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := fs.String("default", "deny", "the decision when nobody answers in time")
	timeout := fs.Float64("timeout", 0, "seconds to wait (0: the daemon's default)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return usagef("use: allox dialog hook opencode [--default allow|deny] [--timeout S] (%v)", err)
	}
	if *def != "allow" && *def != "deny" {
		return usagef("dialog hook opencode: --default %q: use allow or deny", *def)
	}
	var in struct {
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	}
	if err := json.NewDecoder(io.LimitReader(stdin, rpc.MaxRequestBytes)).Decode(&in); err != nil {
		return fmt.Errorf("dialog hook opencode: the tool call on stdin is not JSON: %w", err)
	}
	if in.Tool == "" {
		return fmt.Errorf(`dialog hook opencode: the tool call on stdin names no "tool": give {"tool": NAME, "args": {...}}`)
	}
	decision, reason := "deny", "no answer through the dialog"
	a, err := askDialog(ctx, c, map[string]any{"kind": "permission", "prompt": fmt.Sprintf("opencode wants to use %s: %s", in.Tool, summarize(in.Args)),
		"options": []string{"allow", "deny"}, "default": *def, "timeout": *timeout, "source": "opencode tool.execute.before"})
	switch {
	case err != nil:
		reason = "the dialog could not be asked (" + oneLine(err.Error()) + ")"
	case a.Outcome == "answered":
		decision, reason = a.Choice, "answered by "+a.By+" through the dialog"
	case a.Outcome == "timeout":
		decision, reason = a.Choice, "nobody answered in time: the hook's default"
	}
	return json.NewEncoder(c.stdout).Encode(map[string]string{"decision": decision, "reason": reason})
}
