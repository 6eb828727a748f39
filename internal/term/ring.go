package term

import (
	"fmt"
	"sync"
)

// Ring keeps the last capacity bytes of a terminal's output, addressed by sequence offsets: the
// offset of a byte is the number of bytes the terminal wrote before it. A reader resumes at the
// offset it stopped at and gets every later byte once, with no gap and no duplicate, as long as
// it is not more than capacity bytes behind; a reader that falls further behind is told exactly
// which range it lost. Writers never wait for readers, and a write costs what it copies: the
// bytes live in one circular buffer (grown up to capacity as output comes, then reused), so a
// full ring overwrites its oldest bytes in place instead of moving the rest.
type Ring struct {
	mu      sync.Mutex
	buf     []byte // len(buf) bytes held; once full, the oldest is at start
	start   int
	limit   int
	end     uint64        // offset one past the last byte written
	changed chan struct{} // closed and replaced on every write or close
	closed  bool
}

// LaggedError says a reader asked for bytes the ring no longer holds.
type LaggedError struct{ From, Oldest uint64 }

func (e *LaggedError) Error() string {
	return fmt.Sprintf("output from offset %d to %d was overwritten before it was read; resume with --from %d", e.From, e.Oldest, e.Oldest)
}

// NewRing returns a ring holding at most capacity bytes.
func NewRing(capacity int) *Ring {
	return &Ring{limit: capacity, changed: make(chan struct{})}
}

// Write appends p; it never blocks on readers.
func (r *Ring) Write(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.end += uint64(len(p))
	if len(p) > r.limit {
		p = p[len(p)-r.limit:]
	}
	if grow := min(len(p), r.limit-len(r.buf)); grow > 0 { // not full yet: append
		r.buf = append(r.buf, p[:grow]...) // start stays 0 until the ring is full
		p = p[grow:]
	}
	for len(p) > 0 { // full: overwrite the oldest bytes, wrapping at most once
		n := copy(r.buf[r.start:], p)
		p = p[n:]
		r.start = (r.start + n) % len(r.buf)
	}
	if !r.closed {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// Close marks the end of output: readers that caught up see closed.
func (r *Ring) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.changed)
	}
}

// ReadFrom returns a copy of the bytes from offset from to the end, the offset after them, a
// channel closed at the next write, and whether output has ended. Asking for a future offset
// returns nothing; asking for an overwritten one returns a *LaggedError.
func (r *Ring) ReadFrom(from uint64) (data []byte, next uint64, changed <-chan struct{}, closed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest := r.end - uint64(len(r.buf))
	if from < oldest {
		return nil, from, r.changed, r.closed, &LaggedError{From: from, Oldest: oldest}
	}
	if from > r.end {
		return nil, from, r.changed, r.closed, fmt.Errorf("offset %d is past the end of output (%d); resume with --from %d or less", from, r.end, r.end)
	}
	if from == r.end {
		return nil, r.end, r.changed, r.closed, nil
	}
	skip := (r.start + int(from-oldest)) % len(r.buf)
	data = make([]byte, 0, r.end-from)
	if skip >= r.start { // from skip to the end of the buffer, then what wrapped before start
		data = append(append(data, r.buf[skip:]...), r.buf[:r.start]...)
	} else {
		data = append(data, r.buf[skip:r.start]...)
	}
	return data, r.end, r.changed, r.closed, nil
}

// End returns the offset one past the last byte written.
func (r *Ring) End() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end
}
