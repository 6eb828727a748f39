package term

import (
	"fmt"
	"io"
	"strings"
	"sync"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// Screen is the server-side emulator of one terminal: it consumes the program's output and
// renders the current viewport, so a reader gets the screen as it is rather than a replay of raw
// bytes. The emulator answers terminal queries (DSR, DA) on its reply pipe; Screen pumps those
// replies to reply without ever letting a stalled reply path block Write.
type Screen struct {
	mu        sync.Mutex
	emu       *vt.Emulator
	bracketed bool
	replies   chan []byte
}

// Snapshot is the viewport as text with the cursor and the alternate-screen flag.
type Snapshot struct {
	Lines                []string
	CursorRow, CursorCol int
	Alt                  bool
	Cols, Rows           int
	// Bracketed reports whether the program enabled bracketed paste (mode 2004).
	Bracketed bool
}

// Render draws the snapshot on a blank terminal (as text: colours are not redrawn), leaving the
// cursor where the program had it: what an attaching client is sent before the output that follows.
func (s Snapshot) Render() string {
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	if s.Alt {
		b.WriteString("\x1b[?1049h\x1b[H\x1b[2J")
	}
	for i, l := range s.Lines {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(l)
	}
	fmt.Fprintf(&b, "\x1b[%d;%dH", s.CursorRow+1, s.CursorCol+1)
	return b.String()
}

// NewScreen returns an emulator of cols×rows keeping scrollback lines of history; replies to the
// program's queries go to reply (nil drops them).
func NewScreen(cols, rows, scrollback int, reply func([]byte)) *Screen {
	s := &Screen{emu: vt.NewEmulator(cols, rows), replies: make(chan []byte, 64)}
	s.emu.SetScrollbackSize(scrollback)
	s.emu.SetCallbacks(vt.Callbacks{
		EnableMode:  func(m ansi.Mode) { s.setMode(m, true) },
		DisableMode: func(m ansi.Mode) { s.setMode(m, false) },
	})
	go s.readReplies()
	go func() {
		for b := range s.replies {
			if reply != nil {
				reply(b)
			}
		}
	}()
	return s
}

func (s *Screen) setMode(m ansi.Mode, on bool) {
	if m == ansi.ModeBracketedPaste {
		s.bracketed = on
	}
}

// readReplies drains the emulator's reply pipe at once, so the emulator's Write never waits; a
// reply that cannot be queued because the program stopped reading its input is dropped.
func (s *Screen) readReplies() {
	buf := make([]byte, 4096)
	for {
		n, err := s.emu.Read(buf)
		if n > 0 {
			select {
			case s.replies <- append([]byte(nil), buf[:n]...):
			default:
			}
		}
		if err != nil {
			close(s.replies)
			return
		}
	}
}

// Write feeds program output to the emulator.
func (s *Screen) Write(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.emu.Write(p)
}

// Resize changes the emulator's size.
func (s *Screen) Resize(cols, rows int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emu.Resize(cols, rows)
}

// Close stops the reply pump. It closes the emulator's reply pipe rather than calling the
// emulator's Close, whose unsynchronised closed flag the pump's Read would race with.
func (s *Screen) Close() {
	if pw, ok := s.emu.InputPipe().(*io.PipeWriter); ok {
		_ = pw.CloseWithError(io.EOF)
	}
}

// Scrollback renders the history above the viewport (oldest first) followed by the viewport.
func (s *Screen) Scrollback() []string { return strings.Split(string(s.ScrollbackBytes()), "\n") }

// ScrollbackBytes is Scrollback as one text, its lines joined by newlines: rendered into one
// buffer sized first, with no allocation per line or per cell.
func (s *Screen) ScrollbackBytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	cols, rows := s.emu.Width(), s.emu.Height()
	var hist []uv.Line
	if sb := s.emu.Scrollback(); sb != nil {
		hist = sb.Lines()
	}
	size := rows * (cols + 1)
	for _, l := range hist {
		size += len(l) + 1 // wide characters' cells hold more bytes; append grows then
	}
	buf := make([]byte, 0, size)
	for _, l := range hist {
		start := len(buf)
		for i := range l {
			buf = appendCell(buf, &l[i])
		}
		buf = append(trimBlanks(buf, start), '\n')
	}
	return s.viewport(buf)
}

// Snapshot renders the viewport: one string per row, trailing blanks trimmed.
func (s *Screen) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	cols, rows := s.emu.Width(), s.emu.Height()
	snap := Snapshot{Cols: cols, Rows: rows, Alt: s.emu.IsAltScreen(), Bracketed: s.bracketed}
	snap.Lines = strings.Split(string(s.viewport(make([]byte, 0, rows*(cols+1)))), "\n")
	pos := s.emu.CursorPosition()
	snap.CursorRow, snap.CursorCol = pos.Y, pos.X
	return snap
}

// viewport appends the viewport's rows to buf, joined by newlines.
func (s *Screen) viewport(buf []byte) []byte {
	cols, rows := s.emu.Width(), s.emu.Height()
	for y := range rows {
		if y > 0 {
			buf = append(buf, '\n')
		}
		start := len(buf)
		for x := range cols {
			if c := s.emu.CellAt(x, y); c != nil {
				buf = appendCell(buf, c)
			} else {
				buf = append(buf, ' ')
			}
		}
		buf = trimBlanks(buf, start)
	}
	return buf
}

// appendCell renders one cell: nothing for the second column of a wide character, a blank for an
// empty cell.
func appendCell(buf []byte, c *uv.Cell) []byte {
	switch {
	case c.Width == 0 && c.Content == "": // the second column of a wide character
		return buf
	case c.Content == "":
		return append(buf, ' ')
	default:
		return append(buf, c.Content...)
	}
}

// trimBlanks drops the trailing blanks of the line that starts at start.
func trimBlanks(buf []byte, start int) []byte {
	for len(buf) > start && buf[len(buf)-1] == ' ' {
		buf = buf[:len(buf)-1]
	}
	return buf
}
