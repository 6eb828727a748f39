package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/allox-os/allox/internal/rpc"
)

const actionDialogAsk = "dialog.ask"

var dialogTyped = map[string]func(context.Context, *caller, []string, io.Reader) error{
	"ask":  dialogAsk,
	"hook": dialogHook,
}

// dialogAnswer is dialog.ask's result.
type dialogAnswer struct {
	RequestID string `json:"request_id"`
	Choice    string `json:"choice"`
	Outcome   string `json:"outcome"`
	By        string `json:"by"`
}

// options is a repeatable --option.
type options []string

func (o *options) String() string     { return strings.Join(*o, ",") }
func (o *options) Set(v string) error { *o = append(*o, v); return nil }

// dialogAsk is "allox dialog ask [--question] [--option X]... --default X [--timeout S] PROMPT":
// it asks whoever answers for the session and prints the choice (the default on timeout). A
// PROMPT of "-" is read from stdin: a run's command line is part of its record, stdin is not.
func dialogAsk(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	fs := flag.NewFlagSet("allox dialog ask", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	question := fs.Bool("question", false, "a question (the default: a permission request, allow or deny)")
	var opts options
	fs.Var(&opts, "option", "an answer that may be given (repeat it)")
	def := fs.String("default", "", "the answer on timeout")
	timeout := fs.Float64("timeout", 0, "seconds to wait (0: the daemon's default)")
	source := fs.String("source", "", "what asks, for the record")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		return usagef("use: allox dialog ask [--question] [--option X]... --default X [--timeout S] [--source S] PROMPT|- (%v)", err)
	}
	kind := "permission"
	if *question {
		kind = "question"
	}
	prompt := fs.Arg(0)
	if prompt == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, rpc.MaxRequestBytes))
		if err != nil {
			return fmt.Errorf("dialog ask: read the prompt from stdin: %w", err)
		}
		prompt = strings.TrimSuffix(string(b), "\n")
	}
	a, err := askDialog(ctx, c, map[string]any{"kind": kind, "prompt": prompt, "options": []string(opts),
		"default": *def, "timeout": *timeout, "source": *source})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.stdout, a.Choice)
	return err
}

func askDialog(ctx context.Context, c *caller, params map[string]any) (dialogAnswer, error) {
	var a dialogAnswer
	if err := c.client.Call(ctx, actionDialogAsk, params, &a); err != nil {
		if isUnknownAction(err) {
			return a, fmt.Errorf("dialog: the dialog plugin is not enabled in this appliance: the workspace daemon enables it with --dialog")
		}
		return a, c.explain(actionDialogAsk, err)
	}
	return a, nil
}

// dialogHook is "allox dialog hook claude-code [--default allow|deny|ask] [--timeout S]": Claude
// Code's PreToolUse hook. It reads the hook's JSON on stdin, asks for permission to use the tool,
// and writes the decision as the hook's JSON output. The default "ask" leaves the decision to
// Claude Code's own prompt in its terminal when nobody answers in time; when the dialog cannot
// be asked at all it also says "ask", so the agent is never blocked or waved through by a fault
// here.
func dialogHook(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	if len(args) > 0 && args[0] == "opencode" {
		return dialogHookOpencode(ctx, c, args[1:], stdin)
	}
	if len(args) == 0 || args[0] != "claude-code" {
		return usagef("use: allox dialog hook claude-code|opencode [--default allow|deny|ask] [--timeout S] (Claude Code's PreToolUse hook command, or the Probe's opencode plugin's)")
	}
	fs := flag.NewFlagSet("allox dialog hook claude-code", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := fs.String("default", "ask", "the decision when nobody answers in time")
	timeout := fs.Float64("timeout", 0, "seconds to wait (0: the daemon's default)")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
		return usagef("use: allox dialog hook claude-code [--default allow|deny|ask] [--timeout S] (%v)", err)
	}
	var in struct {
		Event     string          `json:"hook_event_name"`
		Tool      string          `json:"tool_name"`
		ToolInput json.RawMessage `json:"tool_input"`
	}
	if err := json.NewDecoder(io.LimitReader(stdin, rpc.MaxRequestBytes)).Decode(&in); err != nil {
		return fmt.Errorf("dialog hook claude-code: the hook's input on stdin is not JSON: %w", err)
	}
	if in.Event != "PreToolUse" {
		return fmt.Errorf("dialog hook claude-code: hook event %q: install it as a PreToolUse hook", in.Event)
	}
	prompt := fmt.Sprintf("Claude Code wants to use %s: %s", in.Tool, summarize(in.ToolInput))
	decision, reason := "ask", "no answer through the dialog: Claude Code asks in its terminal"
	a, err := askDialog(ctx, c, map[string]any{"kind": "permission", "prompt": prompt, "options": []string{"allow", "deny", "ask"},
		"default": *def, "timeout": *timeout, "source": "claude-code PreToolUse"})
	switch {
	case err != nil:
		reason = "the dialog could not be asked (" + oneLine(err.Error()) + "): Claude Code asks in its terminal"
	case a.Outcome == "answered":
		decision, reason = a.Choice, "answered by "+a.By+" through the dialog"
	case a.Outcome == "timeout":
		decision, reason = a.Choice, "nobody answered in time: the hook's default"
	}
	out := map[string]any{"hookSpecificOutput": map[string]any{"hookEventName": "PreToolUse",
		"permissionDecision": decision, "permissionDecisionReason": reason}}
	return json.NewEncoder(c.stdout).Encode(out)
}

// summarize is a tool input on one line, at most 2 KiB: a command, a path, or the JSON.
func summarize(raw json.RawMessage) string {
	var m map[string]any
	s := string(raw)
	if json.Unmarshal(raw, &m) == nil {
		for _, k := range []string{"command", "file_path", "filePath", "url", "pattern"} {
			if v, ok := m[k].(string); ok {
				s = v
				break
			}
		}
	}
	s = oneLine(s)
	if len(s) > 2048 {
		s = s[:2048] + "…"
	}
	return s
}
