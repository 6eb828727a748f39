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

// Against a model that keeps every byte: after writes of every size around the capacity
// (smaller, equal, larger, wrapping at each position), a read from every offset the ring still
// holds returns exactly the model's tail, and every older offset reports the exact loss.
func TestRingMatchesModelAcrossWraps(t *testing.T) {
	const capacity = 13
	r := NewRing(capacity)
	var all []byte
	sizes := []int{1, 5, 12, 13, 14, 3, 0, 26, 7, 9, 2, 11, 40, 1, 6}
	for i, n := range sizes {
		chunk := make([]byte, n)
		for j := range chunk {
			chunk[j] = byte('a' + (len(all)+j)%26)
		}
		r.Write(chunk)
		all = append(all, chunk...)
		end := uint64(len(all))
		oldest := uint64(max(0, len(all)-capacity))
		for from := uint64(0); from <= end; from++ {
			data, next, _, _, err := r.ReadFrom(from)
			if from < oldest {
				var lag *LaggedError
				if !errors.As(err, &lag) || lag.From != from || lag.Oldest != oldest {
					t.Fatalf("write %d (size %d), from %d: %v, want lagged to %d", i, n, from, err, oldest)
				}
				continue
			}
			if err != nil || next != end || !bytes.Equal(data, all[from:]) {
				t.Fatalf("write %d (size %d), from %d: %q next %d err %v, want %q next %d", i, n, from, data, next, err, all[from:], end)
			}
		}
	}
}

// BenchmarkRingWriteFull writes 4 KiB chunks into a full 1 MiB ring (a terminal printing fast
// for a long time), beside a copy of the same bytes into a buffer of that size, the floor any
// ring pays: the ratio is the ring's overhead over copying what it keeps.
func BenchmarkRingWriteFull(b *testing.B) {
	chunk := bytes.Repeat([]byte("x"), 4<<10)
	b.Run("ring", func(b *testing.B) {
		r := NewRing(1 << 20)
		for range 300 { // fill it, and wrap
			r.Write(chunk)
		}
		b.SetBytes(int64(len(chunk)))
		for b.Loop() {
			r.Write(chunk)
		}
	})
	b.Run("copy", func(b *testing.B) {
		dst := make([]byte, 1<<20)
		var at int
		b.SetBytes(int64(len(chunk)))
		for b.Loop() {
			at = (at + copy(dst[at:], chunk)) % len(dst)
		}
	})
}
