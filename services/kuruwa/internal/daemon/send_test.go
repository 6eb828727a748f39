package daemon_test

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
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
