package term

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// A reader that resumes at the offset it was given gets every byte once: no gap, no duplicate.
func TestRingResumeHasNoGapAndNoDuplicate(t *testing.T) {
	r := NewRing(64)
	var want, got bytes.Buffer
	var from uint64
	for i := range 100 {
		chunk := []byte(fmt.Sprintf("<%d>", i))
		r.Write(chunk)
		want.Write(chunk)
		if i%3 == 0 { // read at irregular points
			data, next, _, _, err := r.ReadFrom(from)
			if err != nil {
				t.Fatal(err)
			}
			got.Write(data)
			from = next
		}
	}
	data, _, _, _, err := r.ReadFrom(from)
	if err != nil {
		t.Fatal(err)
	}
	got.Write(data)
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("got %q\nwant %q", got.Bytes(), want.Bytes())
	}
}

// A reader that fell more than the ring's size behind is told the exact range it lost, and a
// writer never waits for it.
func TestRingSlowReaderLagsWithoutBlockingTheWriter(t *testing.T) {
	r := NewRing(16)
	for range 1000 {
		r.Write([]byte("0123456789"))
	}
	_, _, _, _, err := r.ReadFrom(0)
	var lag *LaggedError
	if !errors.As(err, &lag) || lag.From != 0 || lag.Oldest != 10000-16 {
		t.Fatalf("got %v, want lagged from 0 to %d", err, 10000-16)
	}
	data, next, _, _, err := r.ReadFrom(lag.Oldest)
	if err != nil || len(data) != 16 || next != 10000 {
		t.Fatalf("resume at oldest: %q %d %v", data, next, err)
	}
}

func TestRingRefusesFutureOffset(t *testing.T) {
	r := NewRing(16)
	r.Write([]byte("abc"))
	if _, _, _, _, err := r.ReadFrom(4); err == nil {
		t.Fatal("an offset past the end was accepted")
	}
}

func TestRingWriteAfterCloseDoesNotPanic(t *testing.T) {
	r := NewRing(8)
	r.Close()
	r.Write([]byte("late"))
	if _, _, _, closed, _ := r.ReadFrom(0); !closed {
		t.Fatal("ring not closed")
	}
}
