package daemon_test

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// inputLogger is a program that optionally enables bracketed paste, then logs every read of its
// input with a timestamp until it reads a carriage return.
const inputLogger = `
import os, sys, time, tty
tty.setraw(0)
if sys.argv[2] == "bracketed":
    os.write(1, b"\x1b[?2004h")
os.write(1, b"READY\r\n")
with open(sys.argv[1], "w") as log:
    while True:
        b = os.read(0, 4096)
        log.write("%.6f %s\n" % (time.monotonic(), b.hex()))
        log.flush()
        if b"\r" in b:
            break
`

type read struct {
	at   float64
	data string
}

func readLog(t *testing.T, path string) []read {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), "0d") || time.Now().After(deadline) {
			var out []read
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				f := strings.Fields(l)
				if len(f) != 2 {
					continue
				}
				at, _ := strconv.ParseFloat(f[0], 64)
				data, _ := hex.DecodeString(f[1])
				out = append(out, read{at, string(data)})
			}
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func joined(reads []read) string {
	var b strings.Builder
	for _, r := range reads {
		b.WriteString(r.data)
	}
	return b.String()
}

// startLogger runs inputLogger as terminal name in the host instance and returns where it logs.
func startLogger(t *testing.T, name, mode string) (*fixture, string) {
	t.Helper()
	py := testenv.Tool(t, "python3", "apt-get install python3 (ci/deps.sh)")
	f := newDaemon(t, boxConfig)
	log := filepath.Join(f.dir, "input.log")
	f.must(f.mgmt(), "start", name, "--instance", "host", "--", py, "-c", inputLogger, log, mode)
	f.waitScreen(f.mgmt(), name, "READY")
	return f, log
}

// Multi-line text to a program that asked for bracketed paste goes as one paste; Enter follows
// as its own write after the settle delay, never inside the paste.
func TestSendPastesThenSendsEnterAfterSettle(t *testing.T) {
	f, log := startLogger(t, "tui", "bracketed")
	f.must(f.mgmt(), "send", "tui", "line one\nline two", "--key", "Enter", "--settle", "300ms")
	reads := readLog(t, log)
	if want := "\x1b[200~line one\nline two\x1b[201~\r"; joined(reads) != want {
		t.Fatalf("program read %q, want %q", joined(reads), want)
	}
	last := reads[len(reads)-1]
	if last.data != "\r" || len(reads) < 2 {
		t.Fatalf("Enter arrived with other input: %q", last.data)
	}
	if gap := last.at - reads[len(reads)-2].at; gap < 0.25 {
		t.Fatalf("Enter came %.3fs after the paste, want at least the 300ms settle", gap)
	}
}

// A program that never asked for bracketed paste gets the text as typed.
func TestSendTypesPlainTextWithoutBracketedPaste(t *testing.T) {
	f, log := startLogger(t, "plain", "plain")
	f.must(f.mgmt(), "send", "plain", "a\nb", "--enter", "--settle", "0")
	if got := joined(readLog(t, log)); got != "a\nb\r" {
		t.Fatalf("program read %q, want %q", got, "a\nb\r")
	}
}

// A send the daemon refuses writes nothing at all: neither its text nor any key before the one
// that is wrong.
func TestRefusedSendWritesNothing(t *testing.T) {
	f, log := startLogger(t, "tui", "plain")
	conn := f.dial(f.mgmt())
	many := make([]string, wire.MaxSendKeys+1)
	for i := range many {
		many[i] = "Left"
	}
	for _, tc := range []struct {
		why  string
		args wire.SendArgs
	}{
		{"too many keys", wire.SendArgs{Text: "typed", Keys: many}},
		{"too much settling in all", wire.SendArgs{Text: "typed", Keys: []string{"Left", "Left", "Left", "Left"}, SettleMS: 10000}},
		{"a settle out of range", wire.SendArgs{Text: "typed", Keys: []string{"Left"}, SettleMS: 10001}},
		{"a bad key name", wire.SendArgs{Text: "typed", Keys: []string{"Left", "NoSuchKey"}}},
	} {
		tc.args.Name = "tui"
		err := conn.Call("send", tc.args, nil)
		if !errors.Is(err, &wire.Error{Code: wire.CodeBadRequest}) {
			t.Errorf("%s: got %v, want code %s", tc.why, err, wire.CodeBadRequest)
		}
	}
	f.must(f.mgmt(), "send", "tui", "done", "--enter", "--settle", "0")
	if got := joined(readLog(t, log)); got != "done\r" {
		t.Fatalf("program read %q, want only the accepted send's %q", got, "done\r")
	}
}

// Two tenants sending to one terminal at once: each paste is followed by its own keys, with
// the other's send wholly before or after, never in between.
func TestConcurrentSendsKeepEachPasteWithItsKeys(t *testing.T) {
	f, log := startLogger(t, "tui", "bracketed")
	f.must(f.mgmt(), "grant", "other", "--terminal", "tui")
	host, other := f.dial(f.mgmt()), f.dial(f.entry("other"))
	first := make(chan error, 1)
	go func() {
		first <- host.Call("send", wire.SendArgs{Name: "tui", Text: "A1\nA2", Keys: []string{"C-a", "C-a"}, SettleMS: 500}, nil)
	}()
	// The host's paste is in; its keys are due in 500 ms when the other tenant sends.
	deadline := time.Now().Add(10 * time.Second)
	for b, _ := os.ReadFile(log); !strings.Contains(string(b), hex.EncodeToString([]byte("A2"))); b, _ = os.ReadFile(log) {
		if time.Now().After(deadline) {
			t.Fatal("the host's paste never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := other.Call("send", wire.SendArgs{Name: "tui", Text: "B1\nB2", Keys: []string{"C-b"}, SettleMS: 100}, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	f.must(f.mgmt(), "send", "tui", "", "--enter", "--settle", "0")
	a, b := "\x1b[200~A1\nA2\x1b[201~\x01\x01", "\x1b[200~B1\nB2\x1b[201~\x02"
	if got := joined(readLog(t, log)); got != a+b+"\r" {
		t.Fatalf("program read %q, want %q: the sends interleaved", got, a+b+"\r")
	}
}
