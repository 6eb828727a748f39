package instance

import (
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// newServer is an instance daemon with transcripts in a directory of its own, not serving; its
// terminals are ended when the test ends.
func newServer(t *testing.T) *Server {
	t.Helper()
	state, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer("test", state)
	t.Cleanup(func() { s.killAll(); state.Close() })
	return s
}

// startIn starts argv as terminal id of s.
func startIn(t *testing.T, s *Server, id string, argv ...string) *entry {
	t.Helper()
	if _, err := s.start(wire.StartArgs{ID: id, Name: id, Argv: argv}); err != nil {
		t.Fatal(err)
	}
	e, err := s.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// outputUntil waits for want in the terminal's output and returns the output so far.
func outputUntil(t *testing.T, e *entry, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _, _, _, err := e.t.Ring().ReadFrom(0)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), want) {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal's output after 10 s: %q", want, data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantFieldError fails unless err is a bad-request error naming field.
func wantFieldError(t *testing.T, err error, field string) {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeBadRequest || we.Field != field {
		t.Fatalf("error %v, want a %s error naming %q", err, wire.CodeBadRequest, field)
	}
}

// refusedWritesNothing checks that the text of a refused send never reached the program: a
// marker sent after it arrives, and nothing of the refused send before it (its text, or the
// echo of its keys, C-a).
func refusedWritesNothing(t *testing.T, s *Server, e *entry, refused string) {
	t.Helper()
	if err := s.send(wire.SendArgs{ID: "cat", Text: "marker\n"}); err != nil {
		t.Fatal(err)
	}
	if out := outputUntil(t, e, "marker"); strings.Contains(out, refused) || strings.Contains(out, "^A") {
		t.Fatalf("a refused send reached the program: %q", out)
	}
}

// One send holds the terminal's input while it writes; a send of endless keys would hold attach
// and every other send out for as long as it likes. It is refused, and writes nothing.
func TestSendOfTooManyKeysIsRefusedAndWritesNothing(t *testing.T) {
	s := newServer(t)
	e := startIn(t, s, "cat", "cat")
	err := s.send(wire.SendArgs{ID: "cat", Text: "refused", Keys: slices.Repeat([]string{"C-a"}, wire.MaxSendKeys+1)})
	wantFieldError(t, err, "keys")
	refusedWritesNothing(t, s, e, "refused")
}

// The same with few keys but long settle delays before each: 40 s of settling in one send is
// refused before anything is written, not found out 40 s later.
func TestSendWhoseSettlingExceedsTheBoundIsRefusedAndWritesNothing(t *testing.T) {
	s := newServer(t)
	e := startIn(t, s, "cat", "cat")
	err := s.send(wire.SendArgs{ID: "cat", Text: "refused", Keys: []string{"C-a", "C-a", "C-a", "C-a"}, SettleMS: 10000})
	wantFieldError(t, err, "settle")
	refusedWritesNothing(t, s, e, "refused")
}

// Text sent as a bracketed paste that holds the paste's end marker itself must not end the paste
// there: "cmd" after it would reach the program as typed, and a shell or an agent's TUI would
// run it. The program here reads exactly the bytes a paste of the text without its markers is
// and prints them.
func TestPastedTextCannotEndThePasteEarly(t *testing.T) {
	s := newServer(t)
	want := "\x1b[200~" + "a\nb\rcmd\n" + "\x1b[201~"
	e := startIn(t, s, "paste", "sh", "-c", `printf '\033[?2004h'; stty raw -echo; printf READY; `+
		`dd bs=1 count=`+strconv.Itoa(len(want))+` 2>/dev/null | od -An -tx1; printf END; sleep 100`)
	outputUntil(t, e, "READY")
	if !e.t.Bracketed() {
		t.Fatal("the program's bracketed paste mode was not tracked")
	}
	if err := s.send(wire.SendArgs{ID: "paste", Text: "a\nb\x1b[201~\rcmd\n\x1b[200~"}); err != nil {
		t.Fatal(err)
	}
	out := outputUntil(t, e, "END")
	got := strings.Join(strings.Fields(out[strings.Index(out, "READY")+len("READY"):strings.Index(out, "END")]), "")
	if got != hex.EncodeToString([]byte(want)) {
		t.Fatalf("the program read %s, want the paste %q (%x)", got, want, want)
	}
}
