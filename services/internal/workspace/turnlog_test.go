package workspace

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// The history survives a reopen (a torn last line is skipped), keeps the newest MaxTurns turns,
// and goes with its session.
func TestTurnLog(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenTurnLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := 0; i <= MaxTurns; i++ {
		id := strconv.Itoa(i)
		if err := l.change("a", "s", id, func(*Turn) (*Turn, error) { return &Turn{TurnID: id, Begun: &now, Outcome: TurnOpen}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.change("a", "s", "5", func(prev *Turn) (*Turn, error) {
		t := *prev
		t.Outcome, t.Ended = TurnSucceeded, &now
		return &t, nil
	}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(l.path("a", "s"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"turn_id":"torn","outc`) // a crash mid-append
	f.Close()
	reopened, err := OpenTurnLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	turns, err := reopened.List("a", "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != MaxTurns || turns[0].TurnID != "1" || turns[4].Outcome != TurnSucceeded {
		t.Errorf("after %d turns and a reopen: %d kept, first %q, turn 5 %q; want %d from \"1\", turn 5 succeeded",
			MaxTurns+1, len(turns), turns[0].TurnID, turns[4].Outcome, MaxTurns)
	}
	if open, ok := reopened.Open("a", "s"); !ok || open.TurnID != strconv.Itoa(MaxTurns) {
		t.Errorf("the open turn: %+v %v, want the last begun", open, ok)
	}
	if err := reopened.Forget("a", "s"); err != nil {
		t.Fatal(err)
	}
	if turns, _ := reopened.List("a", "s"); len(turns) != 0 {
		t.Errorf("a deleted session's history: %d turns, want none", len(turns))
	}
}
