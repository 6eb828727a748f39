package cli

import (
	"context"
	"io"
)

// Skill is the usage guide an agent loads (kuruwa skill).
const Skill = `# Kuruwa: terminals for agents

You reach Kuruwa through one entry socket, named by KURUWA_ENTRY (or --entry). If it does not
answer, stop and report it: kuruwa never falls back to another entry or starts a daemon.

Terminals have names unique in the daemon. A name grants nothing: you see and use only what
your tenant was granted. Creating a terminal always names its instance.

  kuruwa ls --instances                     instances you may use
  kuruwa start build --instance box -- make test
  kuruwa run check --instance box -- go vet ./...   start, stream output, exit with its status
  kuruwa status build                       running, or exited(N) with the status kept
  kuruwa screen build                       the viewport; first line: cursor, alt screen, size
  kuruwa screen build --scrollback          history and viewport
  kuruwa tail build --from 0                output since an offset; stderr says the next offset
  kuruwa tail build --from 1234 -f          follow from where you stopped (no gap, no repeat)
  kuruwa transcript build                   every raw byte since the start
  kuruwa send sh 'echo hi' --key Enter      text, then Enter as a separate keystroke
  kuruwa send agent "$(cat prompt.txt)" --enter --settle 500ms
  kuruwa send vim --key Esc --key ':wq' --key Enter
  kuruwa cancel build [--signal INT]        signal the terminal's process group
  kuruwa clean build [--force]              remove an exited (or, with --force, running) terminal
  kuruwa gc                                 remove every exited terminal you manage
  kuruwa instance start session --agent A --session S   an instance whose terminals are runs of
                                            that Allox session (HOME is its current/; a rollback
                                            with kill_processes ends them: exited(137))

Sending to TUIs (Codex, Claude Code and others): multi-line text goes as one bracketed paste
when the program asked for it; keys go as separate writes after --settle (default 200ms),
because an Enter that arrives with pasted text is taken as part of the paste. The paste markers
themselves (ESC[200~, ESC[201~) are removed from pasted text. One send takes at most 256 keys
and 30 s of settling in all; split longer sequences. After sending, check with screen that the
program reacted; if not, send --key Enter again.

Keys: Enter Tab Esc Space BSpace Delete Up Down Left Right Home End PageUp PageDown F1-F12 C-a..C-z.

Errors name what is missing: not_found (no such terminal visible to you), forbidden (visible but
not granted: terminal access allows screen, tail, transcript, send, resize and status only),
gone (its instance ended), revoked (your grant was withdrawn; the connection was closed).
`

func skill(_ context.Context, c *Context, _ *invocation) error {
	_, err := io.WriteString(c.Stdout, Skill)
	return err
}
