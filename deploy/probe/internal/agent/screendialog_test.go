package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/term"
)

// codexPrompt is a program on a real terminal that shows codex 0.171.0's command approval (its
// wording, read from the binary) and acts on the one key it reads in raw mode as codex does:
// y runs the command (the file appears), Esc declines it.
const codexPrompt = `stty raw -echo
printf 'Would you like to run the following command?\r\n\r\n  $ touch %s\r\n\r\n> 1. Yes, proceed (y)\r\n  2. Yes, and don'"'"'t ask again for commands that start with touch (p)\r\n  3. No, and tell Codex what to do differently (esc)\r\n' "$FILE"
k=$(dd bs=1 count=1 2>/dev/null)
stty sane
printf '\033[2J\033[H'
case "$k" in y) touch "$FILE"; echo ran ;; *) echo declined ;; esac
exit 0
`

type asked struct {
	mu      sync.Mutex
	prompts []string
}

func (a *asked) ask(choice string, err error) func(context.Context, string) (string, error) {
	return func(_ context.Context, p string) (string, error) {
		a.mu.Lock()
		a.prompts = append(a.prompts, p)
		a.mu.Unlock()
		return choice, err
	}
}

// runPrompt runs codexPrompt on a terminal followed by a codex adapter with screen dialog whose
// questions ask answers; person, when set, types on the terminal once the prompt is up.
func runPrompt(t *testing.T, ask func(context.Context, string) (string, error), person []byte) (file string, a *Adapter, tm *term.Terminal) {
	t.Helper()
	file = filepath.Join(t.TempDir(), "made")
	tm, err := term.Start(term.Spec{Argv: []string{"/bin/sh", "-c", codexPrompt}, Env: []string{"FILE=" + file, "PATH=/usr/bin:/bin"},
		Cols: 120, Rows: 40, RingBytes: 1 << 16, ScrollbackLines: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tm.Signal(9) })
	a = &Adapter{cfg: Config{CLI: CLIs["codex"], Task: Task{Dialog: true}, Ask: ask, Poll: 20 * time.Millisecond, IdleAfter: time.Minute}, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if person != nil {
		go func() {
			for !strings.Contains(a.Screen(), "Would you like to run") || a.ScreenPrompts() == 0 {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // the adapter has tried the dialog meanwhile
			tm.Write(person)
		}()
	}
	if code, sig := a.follow(ctx, tm); code != 0 || sig != "" || ctx.Err() != nil {
		t.Fatalf("the prompt program: exit %d, signal %q, %v; screen:\n%s", code, sig, ctx.Err(), a.Screen())
	}
	return file, a, tm
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// Allowed through the dialog: the question carries the command off the screen, the adapter
// types y, the command runs.
func TestScreenPromptAllowed(t *testing.T) {
	var q asked
	file, a, _ := runPrompt(t, q.ask("allow", nil), nil)
	if !exists(file) {
		t.Errorf("allowed, yet the command did not run; screen:\n%s", a.Screen())
	}
	if len(q.prompts) != 1 || !strings.Contains(q.prompts[0], "touch "+file) || !strings.HasPrefix(q.prompts[0], "codex asks on its terminal:") {
		t.Errorf("the dialog was asked %q: want one question naming the command", q.prompts)
	}
	if !strings.Contains(a.Reason(), "answered allow") {
		t.Errorf("the adapter's reason %q", a.Reason())
	}
}

// Denied (an answer, or the dialog client's default when nobody answers in time): Esc, the
// command does not run.
func TestScreenPromptDenied(t *testing.T) {
	var q asked
	file, a, _ := runPrompt(t, q.ask("deny", nil), nil)
	if exists(file) {
		t.Errorf("denied, yet the command ran; screen:\n%s", a.Screen())
	}
	if len(q.prompts) != 1 || !strings.Contains(a.Screen(), "declined") {
		t.Errorf("asked %d times; screen:\n%s", len(q.prompts), a.Screen())
	}
}

// An answer that is neither allow nor deny is no allow: denied.
func TestScreenPromptOddAnswerDenies(t *testing.T) {
	var q asked
	if file, a, _ := runPrompt(t, q.ask("ask", nil), nil); exists(file) {
		t.Errorf("an answer %q ran the command; screen:\n%s", "ask", a.Screen())
	}
}

// No dialog channel (the client fails): no key is typed, the prompt stays on the terminal, and
// the person at it answers — here y, and the command runs.
func TestScreenPromptFallbackToTerminal(t *testing.T) {
	var q asked
	file, a, _ := runPrompt(t, q.ask("", errors.New("dialog: the dialog plugin is not enabled in this appliance")), []byte("y"))
	if !exists(file) {
		t.Errorf("the person's y on the terminal did not run the command; screen:\n%s", a.Screen())
	}
	if len(q.prompts) != 1 || !strings.Contains(a.Reason(), "waits on the terminal for a person") {
		t.Errorf("asked %d times, reason %q: want one failed ask left to the terminal", len(q.prompts), a.Reason())
	}
}

// While the question is open the adapter is waiting_for_approval; one prompt is asked once,
// however many times the screen is read.
func TestScreenPromptAskedOnceWhileOpen(t *testing.T) {
	release := make(chan struct{})
	var q asked
	var events []wire.Event
	var mu sync.Mutex
	ask := func(ctx context.Context, p string) (string, error) {
		q.ask("", nil)(ctx, p)
		<-release
		return "deny", nil
	}
	go func() { time.Sleep(time.Second); close(release) }()
	file := filepath.Join(t.TempDir(), "made")
	tm, err := term.Start(term.Spec{Argv: []string{"/bin/sh", "-c", codexPrompt}, Env: []string{"FILE=" + file, "PATH=/usr/bin:/bin"},
		Cols: 120, Rows: 40, RingBytes: 1 << 16, ScrollbackLines: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &Adapter{cfg: Config{CLI: CLIs["codex"], Task: Task{Dialog: true}, Ask: ask, Poll: 10 * time.Millisecond, IdleAfter: time.Minute,
		Emit: func(e wire.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}, done: make(chan struct{})}
	a.follow(t.Context(), tm)
	if len(q.prompts) != 1 || exists(file) {
		t.Errorf("asked %d times (want 1), file made %v", len(q.prompts), exists(file))
	}
	mu.Lock()
	defer mu.Unlock()
	var phases []string
	for _, e := range events {
		phases = append(phases, e.Phase)
	}
	if !strings.Contains(strings.Join(phases, " "), wire.AgentApproval) {
		t.Errorf("status events %q: want %s while the question was open", phases, wire.AgentApproval)
	}
}

// Without Task.Dialog (or for a CLI with a hook) nothing is asked off the screen.
func TestScreenDialogOnlyWithDialogAndKeys(t *testing.T) {
	for name, cfg := range map[string]Config{
		"codex without dialog": {CLI: CLIs["codex"]},
		"claude_code (a hook)": {CLI: CLIs["claude_code"], Task: Task{Dialog: true}},
	} {
		a := &Adapter{cfg: cfg}
		if a.screenDialog(nil) != nil {
			t.Errorf("%s: a screen dialog", name)
		}
	}
	a := &Adapter{cfg: Config{CLI: CLIs["codex"], Task: Task{Dialog: true}}}
	if a.screenDialog(nil) == nil {
		t.Error("codex with dialog: no screen dialog")
	}
	if argv := strings.Join(codex.Argv(codex.Binary, Task{Dialog: true, Prompt: "p"}), " "); !strings.Contains(argv, "-a on-request") || strings.Contains(argv, " exec ") {
		t.Errorf("codex with dialog: argv %q, want the interactive TUI asking", argv)
	}
}

// codex with dialog gets its PermissionRequest hook for the run (the in-sandbox dialog client,
// denying on timeout); with ScreenApproval it gets none and its prompts are read off the screen.
func TestCodexDialogHookArgv(t *testing.T) {
	argv := codex.Argv(codex.Binary, Task{Dialog: true, Prompt: "p"})
	joined := strings.Join(argv, " ")
	if !strings.Contains(joined, "--dangerously-bypass-hook-trust") || !slices.Contains(argv, codexHooks()) ||
		!strings.Contains(codexHooks(), `command="/run/allox/bin/allox dialog hook codex --default deny --timeout 300"`) ||
		!strings.HasPrefix(codexHooks(), `hooks.PermissionRequest=[{matcher="*",`) {
		t.Errorf("codex with dialog: argv %q, want its PermissionRequest hook asking the dialog", joined)
	}
	if argv[len(argv)-1] != "p" {
		t.Errorf("codex with dialog: argv %q, want the prompt last", joined)
	}
	screen := strings.Join(codex.Argv(codex.Binary, Task{Dialog: true, ScreenApproval: true, Prompt: "p"}), " ")
	if strings.Contains(screen, "hooks.") || strings.Contains(screen, "hook-trust") || !strings.Contains(screen, "-a on-request") {
		t.Errorf("codex with screen approval: argv %q, want no hook, asking on request", screen)
	}
	if plain := strings.Join(codex.Argv(codex.Binary, Task{Prompt: "p"}), " "); strings.Contains(plain, "hook") {
		t.Errorf("codex without dialog: argv %q, want no hook", plain)
	}
}

// The turn over (codex's "Worked for … •"), the adapter types /quit and Enter: the CLI exits,
// the task is done. A program that exits 3 on anything else stands in for codex.
func TestTurnDoneLeavesTheCLI(t *testing.T) {
	const prog = `stty raw -echo
printf '\342\200\242 The file is written.\r\n  Worked for 1s \342\200\242 6:00 PM\r\n'
line=""
while k=$(dd bs=1 count=1 2>/dev/null); do
  [ "$k" = "$(printf '\r')" ] && break
  line="$line$k"
done
stty sane
[ "$line" = /quit ] && exit 0
exit 3
`
	tm, err := term.Start(term.Spec{Argv: []string{"/bin/sh", "-c", prog}, Env: []string{"PATH=/usr/bin:/bin"},
		Cols: 120, Rows: 40, RingBytes: 1 << 16, ScrollbackLines: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tm.Signal(9) })
	a := &Adapter{cfg: Config{CLI: CLIs["codex"], Task: Task{Dialog: true}, Poll: 20 * time.Millisecond, IdleAfter: time.Minute}, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if code, sig := a.follow(ctx, tm); code != 0 || sig != "" || ctx.Err() != nil {
		t.Errorf("exit %d, signal %q, %v: want the CLI left with /quit (exit 0); screen:\n%s", code, sig, ctx.Err(), a.Screen())
	}
}

// A question still open when the CLI's run ends (killed, or gone by itself) is withdrawn: its
// ask's context ends, so the dialog client's run is closed and nobody answers a dead prompt.
func TestScreenPromptWithdrawnWhenTheRunEnds(t *testing.T) {
	withdrawn := make(chan struct{})
	ask := func(ctx context.Context, _ string) (string, error) {
		<-ctx.Done()
		close(withdrawn)
		return "", ctx.Err()
	}
	tm, err := term.Start(term.Spec{Argv: []string{"/bin/sh", "-c", "printf 'Would you like to run the following command?\\r\\n'; sleep 1"},
		Env: []string{"PATH=/usr/bin:/bin"}, Cols: 120, Rows: 40, RingBytes: 1 << 16, ScrollbackLines: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &Adapter{cfg: Config{CLI: CLIs["codex"], Task: Task{Dialog: true}, Ask: ask, Poll: 10 * time.Millisecond, IdleAfter: time.Minute}, done: make(chan struct{})}
	a.follow(t.Context(), tm)
	if a.ScreenPrompts() != 1 {
		t.Fatalf("%d prompts asked, want 1", a.ScreenPrompts())
	}
	select {
	case <-withdrawn:
	case <-time.After(10 * time.Second):
		t.Error("the question outlived the CLI's run")
	}
}
