// Package agent is the Probe's Adapter Host for the agents' CLIs (codex, claude_code, opencode):
// each adapter launches its CLI in a session's sandbox on a terminal (a process.exec run with a
// pseudo-terminal, internal/term), feeds it a task, surfaces its status (working, idle, waiting
// for approval, done, failed) as Probe events, and restarts it within bounds when it is killed
// mid-task. Adapters are per session: one's faults never reach another's run or counters.
package agent

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Task is what an adapter feeds its CLI.
type Task struct {
	Prompt string
	// ModelURL is the model vendor's endpoint as the sandbox reaches it, e.g.
	// "http://10.0.2.100:8080"; "" leaves the CLI's own default.
	ModelURL string
	// APIKey is the credential the CLI sends to ModelURL.
	APIKey string
	// Model is the model name asked for; "" is the CLI's default.
	Model string
	// Dialog sends the CLI's permission requests through the dialog channel: claude_code gets a
	// PreToolUse hook that asks `allox dialog hook claude-code` (nobody answering denies);
	// codex runs its interactive TUI asking on request, with a PermissionRequest hook that asks
	// `allox dialog hook codex` (nobody answering denies); a prompt it shows anyway goes to the
	// dialog off its screen and is answered with keys (CLI.Keys); opencode gets a plugin asking
	// `allox dialog hook opencode` before each tool call (opencode_dialog.go).
	Dialog bool
	// ScreenApproval (with Dialog) answers codex's approval prompts off its screen alone, without
	// its PermissionRequest hook: the fallback path on its own.
	ScreenApproval bool
}

// HookCommand is Claude Code's PreToolUse hook command with Task.Dialog: the in-sandbox client
// asks the session's dialog and answers with the decision; in one-shot mode nobody is at the
// terminal, so nobody answering (DialogTimeout) denies.
const HookCommand = "/run/allox/bin/allox dialog hook claude-code --default deny --timeout 300"

// claudeSettings is the --settings of claude_code with Task.Dialog: every tool call ("*") goes
// through the hook, which may wait for a person longer than a hook's default 60 s.
func claudeSettings() string {
	b, _ := json.Marshal(map[string]any{"hooks": map[string]any{"PreToolUse": []any{map[string]any{"matcher": "*",
		"hooks": []any{map[string]any{"type": "command", "command": HookCommand, "timeout": 330}}}}}})
	return string(b)
}

// CodexHookCommand is codex's PermissionRequest hook command with Task.Dialog: the in-sandbox
// client asks the session's dialog; nobody answering denies.
const CodexHookCommand = "/run/allox/bin/allox dialog hook codex --default deny --timeout 300"

// codexHooks is the -c override that installs CodexHookCommand for every tool ("*"), with a
// timeout above the dialog's own (codex's hook default is shorter than a person's answer).
func codexHooks() string {
	return fmt.Sprintf(`hooks.PermissionRequest=[{matcher="*",hooks=[{type="command",command=%q,timeout=330}]}]`, CodexHookCommand)
}

// CLI is how one agent's CLI is started with a task and how its screen shows it waits for an
// approval.
type CLI struct {
	Name     string // "codex", "claude_code", "opencode"
	Binary   string // in the image, as mkimage's rootfs.npm bin installs it
	Argv     func(bin string, t Task) []string
	Env      func(t Task) map[string]string
	Approval *regexp.Regexp // a permission prompt on the screen
	// Keys answer the screen's prompt for a CLI with no structured permission hook: with
	// Task.Dialog the adapter asks the dialog what Approval matched and types the answer.
	Keys *Keys
	// TurnDone is the screen of an interactive CLI (Task.Dialog with Keys) whose task's turn
	// has ended, and Quit the keys that then leave it (its run ends: done).
	TurnDone *regexp.Regexp
	Quit     [][]byte
}

// CLIs are the three adapters the seed names, by name.
var CLIs = map[string]CLI{
	"codex":       codex,
	"claude_code": claudeCode,
	"opencode":    opencode,
}

// Lookup returns the CLI named name, or an error that lists the known ones.
func Lookup(name string) (CLI, error) {
	if c, ok := CLIs[name]; ok {
		return c, nil
	}
	return CLI{}, fmt.Errorf("agent CLI %q unknown: use codex, claude_code or opencode", name)
}

// codex exec runs one task to its end; the session's sandbox is the boundary, so codex's own
// sandbox is off (it would nest bubblewrap inside bubblewrap) and it asks for no approvals.
// With Task.Dialog it runs its interactive TUI instead (inline, no alternate screen) in its
// read-only sandbox asking on request (codex 0.171.0 has dropped approval_policy "untrusted";
// codex exec always runs with approval "never", so no request of its ever reaches a hook): a
// command that must leave the sandbox (sandbox_permissions "require_escalated") asks for
// approval. That request goes to codex's PermissionRequest hook (CodexHookCommand, configured
// for the run with -c; the hook is ours, so --dangerously-bypass-hook-trust skips codex's
// review of hooks it has not seen). A hook that gives no decision (the dialog cannot be asked),
// or Task.ScreenApproval, leaves the request to codex's prompt "Would you like to run the
// following command?", which the adapter reads off the screen and answers with the keys of
// codex's approval keymap defaults, y (approve) and Esc (decline); an approved command runs
// outside codex's sandbox, inside the session's.
var codex = CLI{
	Name: "codex", Binary: "/usr/bin/codex",
	Argv: func(bin string, t Task) []string {
		a := []string{bin, "exec", "--skip-git-repo-check", "-s", "danger-full-access"}
		if t.Dialog {
			a = []string{bin, "--no-alt-screen", "-s", "read-only", "-a", "on-request"}
			if !t.ScreenApproval {
				a = append(a, "--dangerously-bypass-hook-trust", "-c", codexHooks())
			}
		}
		if t.Model != "" {
			a = append(a, "-m", t.Model)
		}
		if t.ModelURL != "" {
			a = append(a, "-c", "model_provider=allox", "-c",
				fmt.Sprintf(`model_providers.allox={name="allox",base_url=%q,wire_api="responses",env_key="OPENAI_API_KEY"}`, strings.TrimSuffix(t.ModelURL, "/")+"/v1"))
		}
		return append(a, t.Prompt)
	},
	Env: func(t Task) map[string]string {
		return map[string]string{"OPENAI_API_KEY": t.APIKey, "SHELL": "/bin/sh"}
	},
	Approval: regexp.MustCompile(`(?i)would you like to run the following command\?|allow command\?|\[y/n\]`),
	Keys:     &Keys{Allow: []byte("y"), Deny: []byte("\x1b")},
	// The turn ends with its time worked, or interrupted by a declined command.
	TurnDone: regexp.MustCompile(`Worked for \S+ •|Conversation interrupted - use /feedback`),
	Quit:     [][]byte{[]byte("/quit"), []byte("\r")},
}

// claude -p runs one task to its end with tools allowed (the session's sandbox is the boundary);
// its permission requests are the dialog channel's (allox dialog hook claude-code).
var claudeCode = CLI{
	Name: "claude_code", Binary: "/usr/bin/claude",
	Argv: func(bin string, t Task) []string {
		// Permission checks off (the session's sandbox is the boundary), but a PreToolUse hook
		// still runs, and its deny blocks the tool even so.
		a := []string{bin, "-p", "--dangerously-skip-permissions"}
		if t.Dialog {
			a = append(a, "--settings", claudeSettings())
		}
		if t.Model != "" {
			a = append(a, "--model", t.Model)
		}
		return append(a, t.Prompt)
	},
	Env: func(t Task) map[string]string {
		env := map[string]string{"ANTHROPIC_API_KEY": t.APIKey, "SHELL": "/bin/sh",
			"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
		if t.ModelURL != "" {
			env["ANTHROPIC_BASE_URL"] = strings.TrimSuffix(t.ModelURL, "/")
		}
		return env
	},
	Approval: regexp.MustCompile(`Do you want to (proceed|make this edit)|❯ 1\. Yes`),
}

// opencode run runs one task to its end against an OpenAI-compatible provider given in its
// config (OPENCODE_CONFIG_CONTENT).
var opencode = CLI{
	Name: "opencode", Binary: "/usr/bin/opencode",
	Argv: func(bin string, t Task) []string {
		a := []string{bin, "run"}
		if t.ModelURL != "" {
			a = append(a, "-m", "allox/"+modelOr(t.Model, "scripted"))
		}
		if t.Dialog { // its tool calls ask through the dialog (opencode_dialog.go)
			return opencodeDialogArgv(append(a, t.Prompt))
		}
		return append(a, t.Prompt)
	},
	Env: func(t Task) map[string]string {
		// Offline: without these opencode installs its default plugins and fetches model
		// metadata from the network on start, which a session's sandbox may not reach.
		env := map[string]string{"SHELL": "/bin/sh", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
			"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}
		if t.ModelURL != "" {
			cfg, _ := json.Marshal(map[string]any{"permission": map[string]any{"bash": "allow", "edit": "allow"},
				"provider": map[string]any{"allox": map[string]any{"npm": "@ai-sdk/openai-compatible",
					"options": map[string]any{"baseURL": strings.TrimSuffix(t.ModelURL, "/") + "/v1", "apiKey": t.APIKey},
					"models":  map[string]any{modelOr(t.Model, "scripted"): map[string]any{}}}}})
			env["OPENCODE_CONFIG_CONTENT"] = string(cfg)
		}
		if t.Dialog {
			env["ALLOX_OPENCODE_PLUGIN"] = opencodePlugin()
		}
		return env
	},
	Approval: regexp.MustCompile(`(?i)permission required|allow once`),
}

func modelOr(m, def string) string {
	if m == "" {
		return def
	}
	return m
}
