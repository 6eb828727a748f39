package term

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the emulator")

// screenCases are scripted byte streams in the style of tmux's regress/ scripts: each is fed to
// the emulator, rendered, and compared with its golden file and with Debian's tmux rendering the
// same bytes. A case with a resize feeds before, resizes, then feeds after.
var screenCases = []struct {
	name          string
	cols, rows    int
	before, after string
	resize        [2]int
}{
	{name: "cursor_moves", cols: 40, rows: 8, before: "abc\x1b[5;10Hxyz\x1b[2;3Hmid\x1b[Aup\x1b[3Bdown\x1b[10Dleft\r\nnext"},
	{name: "erase", cols: 30, rows: 6, before: "0123456789\r\nabcdefghij\x1b[1;5H\x1b[K\x1b[2;4H\x1b[1K\x1b[3;1Hkeep\x1b[4;1Hgone\x1b[4;1H\x1b[2K"},
	{name: "wide_chars", cols: 20, rows: 5, before: "a世界b\r\n日本語テキスト\r\n\x1b[1;2Hx"},
	{name: "alt_screen", cols: 30, rows: 6, before: "main line 1\r\nmain line 2\x1b[?1049h\x1b[Halt content\x1b[3;5Hhere"},
	{name: "alt_screen_left", cols: 30, rows: 6, before: "main line 1\r\nmain 2\x1b[?1049h\x1b[Halt content\x1b[?1049lback"},
	{name: "scroll_region", cols: 20, rows: 8, before: "top\x1b[8;1Hbottom\x1b[2;6r\x1b[2;1H" + lines(1, 9) + "\x1b[r"},
	{name: "scroll_up", cols: 20, rows: 5, before: lines(1, 12)},
	{name: "wrap", cols: 10, rows: 5, before: "abcdefghijklmnopqrstuvwxyz\r\nend"},
	{name: "tabs_insert_delete", cols: 30, rows: 4, before: "a\tb\tc\r\nXYZ123\x1b[2;2H\x1b[2@\x1b[2;8H\x1b[P"},
	{name: "resize_smaller", cols: 40, rows: 10, before: "line one\r\nline two\r\nline three", resize: [2]int{40, 5}, after: "\r\nafter"},
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		if i > from {
			b.WriteString("\r\n")
		}
		fmt.Fprintf(&b, "row %d", i)
	}
	return b.String()
}

func renderOurs(cols, rows int, before string, resize [2]int, after string) string {
	s := NewScreen(cols, rows, 100, nil)
	defer s.Close()
	s.Write([]byte(before))
	if resize != [2]int{} {
		s.Resize(resize[0], resize[1])
		s.Write([]byte(after))
	}
	snap := s.Snapshot()
	return fmt.Sprintf("cursor=%d,%d alt=%v\n%s\n", snap.CursorRow, snap.CursorCol, snap.Alt, strings.Join(snap.Lines, "\n"))
}

func TestScreenGolden(t *testing.T) {
	for _, c := range screenCases {
		t.Run(c.name, func(t *testing.T) {
			got := renderOurs(c.cols, c.rows, c.before, c.resize, c.after)
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestScreenGolden -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("screen (-golden +got):\n%s", diff)
			}
		})
	}
}

// TestScreenMatchesTmux renders every case in Debian's tmux and compares the viewport, cursor and
// alternate-screen flag with the emulator's.
func TestScreenMatchesTmux(t *testing.T) {
	tmux := testenv.Tool(t, "tmux", "apt-get install tmux (ci/deps.sh)")
	for _, c := range screenCases {
		t.Run(c.name, func(t *testing.T) {
			got := renderOurs(c.cols, c.rows, c.before, c.resize, c.after)
			want := renderTmux(t, tmux, c.cols, c.rows, c.before, c.resize, c.after)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("emulator differs from tmux (-tmux +ours):\n%s", diff)
			}
		})
	}
}

// TestScrollbackMatchesTmux compares the full history (tmux's capture-pane -S -) after streams
// that scroll lines off the top, wide characters among them.
func TestScrollbackMatchesTmux(t *testing.T) {
	tmux := testenv.Tool(t, "tmux", "apt-get install tmux (ci/deps.sh)")
	for name, stream := range map[string]string{
		"numbered": lines(1, 40),
		"wide":     "日本語の行\r\n" + lines(1, 8) + "\r\n終わり 世界",
		"wrapped":  "abcdefghijklmnopqrstuvwxyz0123456789\r\n" + lines(1, 6),
	} {
		t.Run(name, func(t *testing.T) {
			s := NewScreen(12, 4, 100, nil)
			defer s.Close()
			s.Write([]byte(stream))
			got := strings.TrimRight(strings.Join(s.Scrollback(), "\n"), "\n")
			want := strings.TrimRight(tmuxCapture(t, tmux, 12, 4, stream, "-S", "-"), "\n")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("scrollback differs from tmux (-tmux +ours):\n%s", diff)
			}
		})
	}
}

func tmuxCapture(t *testing.T, tmux string, cols, rows int, stream string, captureArgs ...string) string {
	t.Helper()
	tm := startTmux(t, tmux, cols, rows, map[string]string{"in": stream}, func(dir string, wait func(string) string) string {
		return fmt.Sprintf("stty raw -echo; cat %s/in; %s; sleep 60", dir, wait("-S a"))
	})
	tm("wait-for", "a")
	return trimLines(tm(append([]string{"capture-pane", "-p"}, captureArgs...)...))
}

// startTmux runs a private tmux server with one cols×rows window running the shell script that
// script builds (from the directory holding files, and a wait-for command line), and returns a
// function that runs tmux commands against it.
func startTmux(t *testing.T, tmux string, cols, rows int, files map[string]string, script func(dir string, wait func(string) string) string) func(...string) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tm := func(args ...string) string {
		out, err := exec.Command(tmux, append([]string{"-S", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	wait := func(ch string) string { return fmt.Sprintf("%s -S %s wait-for %s", tmux, sock, ch) }
	tm("new-session", "-d", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), script(dir, wait))
	t.Cleanup(func() { _ = exec.Command(tmux, "-S", sock, "kill-server").Run() })
	tm("set-option", "-g", "status", "off")
	tm("set-option", "-g", "window-size", "manual")
	tm("resize-window", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows))
	return tm
}

func trimLines(s string) string {
	ls := strings.Split(s, "\n")
	for i := range ls {
		ls[i] = strings.TrimRight(ls[i], " ")
	}
	return strings.Join(ls, "\n")
}

func renderTmux(t *testing.T, tmux string, cols, rows int, before string, resize [2]int, after string) string {
	t.Helper()
	tm := startTmux(t, tmux, cols, rows, map[string]string{"before": before, "after": after}, func(dir string, w func(string) string) string {
		return fmt.Sprintf("stty raw -echo; cat %s/before; %s; %s; cat %s/after; %s; sleep 60", dir, w("-S a"), w("b"), dir, w("-S c"))
	})
	tm("wait-for", "a")
	if resize != [2]int{} {
		tm("resize-window", "-x", fmt.Sprint(resize[0]), "-y", fmt.Sprint(resize[1]))
	}
	tm("wait-for", "-S", "b")
	tm("wait-for", "c")
	view := strings.TrimSuffix(trimLines(tm("capture-pane", "-p")), "\n")
	info := strings.Fields(tm("display-message", "-p", "#{cursor_y} #{cursor_x} #{alternate_on}"))
	return fmt.Sprintf("cursor=%s,%s alt=%v\n%s\n", info[0], info[1], info[2] == "1", view)
}

// BenchmarkScrollback renders what `kuruwa screen --scrollback` serves for a terminal that printed
// 2000 lines: the history and the viewport.
func BenchmarkScrollback(b *testing.B) {
	s := NewScreen(80, 24, 10000, nil)
	defer s.Close()
	s.Write([]byte(lines(0, 2000)))
	b.ReportAllocs()
	for b.Loop() {
		if got := len(s.ScrollbackBytes()); got < 2000*len("row 1999") {
			b.Fatalf("%d bytes", got)
		}
	}
}
