package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
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

// hookUsage is dialog hook's usage line.
const hookUsage = "use: allox dialog hook claude-code|codex|opencode [--default allow|deny|ask] [--timeout S] (Claude Code's PreToolUse, codex's PermissionRequest hook command, or the Probe's opencode plugin's)"

// hookInput is what Claude Code's and codex's hooks get on stdin (the fields used here).
type hookInput struct {
	Event     string          `json:"hook_event_name"`
	Tool      string          `json:"tool_name"`
	ToolInput json.RawMessage `json:"tool_input"`
}

// hookFlavors are each hook's default decision and the decisions it can make.
var hookFlavors = map[string]struct {
	def, options string
}{"claude-code": {"ask", "allow deny ask"}, "codex": {"deny", "allow deny"}, "opencode": {"deny", "allow deny"}}

// dialogHook is "allox dialog hook claude-code|codex|opencode [--default D] [--timeout S]": Claude
// Code's PreToolUse hook, codex's PermissionRequest hook, or what the Probe's opencode plugin runs
// from its tool.execute.before hook. It reads the hook's JSON on stdin, asks for permission to
// use the tool, and writes the decision in the hook's own form.
func dialogHook(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	if len(args) == 0 {
		return usagef("%s", hookUsage)
	}
	flavor := args[0]
	d, ok := hookFlavors[flavor]
	if !ok {
		return usagef("%s", hookUsage)
	}
	fs := flag.NewFlagSet("allox dialog hook "+flavor, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := fs.String("default", d.def, "the decision when nobody answers in time")
	timeout := fs.Float64("timeout", 0, "seconds to wait (0: the daemon's default)")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
		return usagef("%s (%v)", hookUsage, err)
	}
	options := strings.Fields(d.options)
	if !slices.Contains(options, *def) {
		return usagef("dialog hook %s: --default %q: use %s (its hook decides nothing else)", flavor, *def, strings.Join(options, " or "))
	}
	dec := json.NewDecoder(io.LimitReader(stdin, rpc.MaxRequestBytes))
	ask := func(prompt, source string) (choice, why string, err error) {
		return askPermission(ctx, c, prompt, options, *def, *timeout, source)
	}
	switch flavor {
	case "codex":
		return codexHook(c, dec, ask)
	case "opencode":
		return opencodeHook(c, dec, ask)
	}
	var in hookInput
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("dialog hook claude-code: the hook's input on stdin is not JSON: %w", err)
	}
	if in.Event != "PreToolUse" {
		return fmt.Errorf("dialog hook claude-code: hook event %q: install it as a PreToolUse hook", in.Event)
	}
	decision, reason, err := ask(fmt.Sprintf("Claude Code wants to use %s: %s", in.Tool, summarize(in.ToolInput)), "claude-code PreToolUse")
	if decision == "" { // Claude Code asks in its terminal
		if err == nil {
			reason = "no answer through the dialog"
		}
		decision, reason = "ask", reason+": Claude Code asks in its terminal"
	}
	out := map[string]any{"hookSpecificOutput": map[string]any{"hookEventName": "PreToolUse",
		"permissionDecision": decision, "permissionDecisionReason": reason}}
	return json.NewEncoder(c.stdout).Encode(out)
}

// askFunc asks the dialog for permission (prompt, source); see askPermission.
type askFunc func(prompt, source string) (choice, why string, err error)

// askPermission asks the dialog a permission question with options and returns the choice and
// why: the answer and who gave it, or the default when nobody answered in time; no choice when
// the question ended otherwise, or (with err) when it could not be asked.
func askPermission(ctx context.Context, c *caller, prompt string, options []string, def string, timeout float64, source string) (choice, why string, err error) {
	a, err := askDialog(ctx, c, map[string]any{"kind": "permission", "prompt": prompt, "options": options,
		"default": def, "timeout": timeout, "source": source})
	switch {
	case err != nil:
		return "", "the dialog could not be asked (" + oneLine(err.Error()) + ")", err
	case a.Outcome == "answered":
		return a.Choice, "answered by " + a.By + " through the dialog", nil
	case a.Outcome == "timeout":
		return a.Choice, "nobody answered in time: the hook's default", nil
	}
	return "", "", nil
}

// codexHook answers codex's PermissionRequest hook (codex 0.171.0: the request on stdin as
// {hook_event_name, tool_name, tool_input, ...}; the answer {"hookSpecificOutput":
// {"hookEventName":"PermissionRequest","decision":{"behavior":"allow"|"deny","message":M}}}).
// Its decisions are allow and deny only; a dialog that cannot be asked answers with no decision,
// and codex then shows its own approval prompt on its terminal (the fallback the adapter reads
// off the screen).
func codexHook(c *caller, dec *json.Decoder, ask askFunc) error {
	var in hookInput
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("dialog hook codex: the hook's input on stdin is not JSON: %w", err)
	}
	if in.Event != "PermissionRequest" {
		return fmt.Errorf("dialog hook codex: hook event %q: install it as a PermissionRequest hook", in.Event)
	}
	choice, why, err := ask(fmt.Sprintf("codex wants to use %s: %s", in.Tool, summarize(in.ToolInput)), "codex PermissionRequest")
	hso := map[string]any{"hookEventName": "PermissionRequest"}
	switch {
	case err != nil:
		fmt.Fprintf(c.stderr, "dialog hook codex: %s: codex asks in its terminal\n", why)
	case choice == "allow" || choice == "deny":
		hso["decision"] = map[string]any{"behavior": choice, "message": why}
	}
	return json.NewEncoder(c.stdout).Encode(map[string]any{"hookSpecificOutput": hso})
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
