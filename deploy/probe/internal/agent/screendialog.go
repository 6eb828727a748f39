package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/allox-os/allox/internal/rpc"
)

// Keys are how a CLI without a structured permission hook is answered on its terminal: the
// bytes that pick "allow" and "deny" in the prompt its screen shows (CLI.Approval).
type Keys struct {
	Allow, Deny []byte
}

// Answers of a permission request asked through the dialog.
const (
	choiceAllow = "allow"
	choiceDeny  = "deny"
)

// DialogAskTimeout is how long a prompt read off the screen waits on the dialog channel before
// its default, deny, is taken.
const DialogAskTimeout = 300

// DialogClient is the in-sandbox dialog client a screen prompt is asked with: the same path as
// Claude Code's hook (the session's dialog socket → the appliance's dialog plugin → the Probe's
// Dialog Forwarder → the Gateway). The prompt goes on stdin, never on the run's command line.
const DialogClient = "/run/allox/bin/allox"

// screenSource names what asks, in the dialog's metadata.
func screenSource(cli string) string { return cli + " terminal prompt" }

// screenDialog answers the permission prompts a CLI shows on its screen through the dialog
// channel: one question per prompt, its answer sent as keys. A prompt whose question cannot be
// asked (no dialog plugin, no dialog client) stays on the terminal for a person: the fallback.
type screenDialog struct {
	cli  CLI
	ask  func(ctx context.Context, prompt string) (string, error)
	send func([]byte) error
	note func(reason string) // the adapter's reason for its status

	mu       sync.Mutex
	asking   bool // a question is open for the prompt on the screen
	answered bool // the prompt on the screen was answered (or left to a person): wait for it to go
	asked    int  // questions asked, for tests
	why      string
}

// step looks at one read of the screen: a new prompt is asked (in the background); a prompt
// that has gone re-arms the next. It reports whether a prompt is on the screen.
func (d *screenDialog) step(ctx context.Context, screen string) bool {
	loc := d.cli.Approval.FindStringIndex(screen)
	d.mu.Lock()
	defer d.mu.Unlock()
	if loc == nil {
		if !d.asking {
			d.answered = false
		}
		return false
	}
	if d.asking || d.answered {
		return true
	}
	d.asking = true
	d.asked++
	d.why = "the permission prompt on the screen is asked through the dialog"
	prompt := promptText(d.cli.Name, screen, loc[0])
	go d.resolve(ctx, prompt)
	return true
}

// resolve asks prompt and answers the screen with the choice's keys.
func (d *screenDialog) resolve(ctx context.Context, prompt string) {
	choice, err := d.ask(ctx, prompt)
	var keys []byte
	switch {
	case err != nil:
		d.say(fmt.Sprintf("the permission prompt could not go through the dialog (%v): it waits on the terminal for a person", err))
	case choice == choiceAllow:
		keys = d.cli.Keys.Allow
	default: // deny, the default on timeout, or anything else
		keys = d.cli.Keys.Deny
	}
	if keys != nil {
		if serr := d.send(keys); serr != nil {
			d.say(fmt.Sprintf("the dialog's answer %s could not be typed on the terminal: %v", choice, serr))
		} else {
			d.say("the permission prompt was answered " + choice + " through the dialog")
		}
	}
	d.mu.Lock()
	d.asking, d.answered = false, true
	d.mu.Unlock()
}

// say records why the prompt is where it is, for the adapter's status.
func (d *screenDialog) say(reason string) {
	d.mu.Lock()
	d.why = reason
	d.mu.Unlock()
	d.note(reason)
}

// reason is why the prompt on the screen is where it is.
func (d *screenDialog) reason() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.why
}

// Asked is how many screen prompts went to the dialog.
func (d *screenDialog) Asked() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked
}

// promptText is the prompt as the dialog shows it: the screen from the prompt's first line on
// (the command it asks about follows it), trimmed, at most 40 lines.
func promptText(cli, screen string, at int) string {
	start := strings.LastIndexByte(screen[:at], '\n') + 1
	lines := strings.Split(screen[start:], "\n")
	var out []string
	for _, l := range lines[:min(len(lines), 40)] {
		if l = strings.TrimRight(l, " "); l != "" {
			out = append(out, l)
		}
	}
	return cli + " asks on its terminal:\n" + strings.Join(out, "\n")
}

// askInSession asks prompt with the dialog client in the session's sandbox (a run of
// `allox dialog ask` with the prompt on stdin) and returns its choice: allow or deny, deny when
// nobody answers in time.
func askInSession(ctx context.Context, c Runner, agent, session, cli, prompt string) (string, error) {
	argv := []string{DialogClient, "dialog", "ask", "--option", choiceAllow, "--option", choiceDeny, "--default", choiceDeny,
		"--timeout", fmt.Sprint(DialogAskTimeout), "--source", screenSource(cli), "-"}
	x, err := c.Exec(ctx, map[string]any{"agent_id": agent, "session_id": session, "argv": argv})
	if err != nil {
		return "", fmt.Errorf("start the dialog client: %w", err)
	}
	defer x.Close()
	stop := context.AfterFunc(ctx, func() { x.Close() }) // the CLI's run ended: the question is withdrawn
	defer stop()
	var stderr bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&stderr, io.LimitReader(x.Stderr, 4096)); io.Copy(io.Discard, x.Stderr); close(copied) }()
	if _, err := x.Write([]byte(prompt)); err != nil {
		return "", fmt.Errorf("the dialog client's stdin: %w", err)
	}
	if err := x.CloseStdin(); err != nil {
		return "", fmt.Errorf("the dialog client's stdin: %w", err)
	}
	out, _ := io.ReadAll(io.LimitReader(x.Stdout, 4096))
	wctx, cancel := context.WithTimeout(ctx, (DialogAskTimeout+60)*time.Second)
	defer cancel()
	r, err := x.Wait(wctx)
	if err != nil {
		return "", fmt.Errorf("the dialog client: %w", err)
	}
	<-copied
	if r.ExitCode == nil || *r.ExitCode != 0 {
		return "", fmt.Errorf("the dialog client failed (%s): %s", exitOf(r), strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func exitOf(r rpc.Run) string {
	if r.ExitCode != nil {
		return fmt.Sprintf("exit %d", *r.ExitCode)
	}
	return "signal " + r.Signal
}
