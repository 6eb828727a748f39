package probe

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// Emitter is the Event Emitter: a bounded queue of events, sent to the Gateway in batches under
// the epoch held at sending time. With no epoch (fenced) it holds them; when the queue is full
// the oldest go (counted). Events are metadata: never workspace content.
type Emitter struct {
	max     int
	mu      sync.Mutex
	queue   []wire.Event
	dropped int
	sent    int
	kick    chan struct{}
}

// NewEmitter holds up to max events.
func NewEmitter(max int) *Emitter { return &Emitter{max: max, kick: make(chan struct{}, 1)} }

// Emit queues ev (its time and trace id filled in when missing).
func (e *Emitter) Emit(ev wire.Event) {
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	if ev.TraceID == "" {
		ev.TraceID = wire.NewTraceID()
	}
	e.mu.Lock()
	e.queue = append(e.queue, ev)
	if over := len(e.queue) - e.max; over > 0 {
		e.queue = e.queue[over:]
		e.dropped += over
	}
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// reporter is the part of the Gateway client the emitter uses.
type reporter interface {
	Report(ctx context.Context, epoch int64, evs []wire.Event) error
}

// Run sends queued events until ctx ends.
func (e *Emitter) Run(ctx context.Context, gw reporter, epoch func() int64) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		case <-t.C:
		}
		e.flush(ctx, gw, epoch())
	}
}

func (e *Emitter) flush(ctx context.Context, gw reporter, epoch int64) {
	if epoch == 0 {
		return
	}
	e.mu.Lock()
	batch := append([]wire.Event(nil), e.queue...)
	e.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	for i := range batch {
		batch[i].Epoch = epoch
	}
	err := gw.Report(ctx, epoch, batch)
	var ref *wire.ErrRefused
	switch {
	case err == nil:
	case errors.Is(err, lease.ErrLost):
		return // kept for the next epoch
	case errors.As(err, &ref) && ref.Status < 500:
		// Refused for what they say (e.g. a DevBox no longer placed here): sending them again
		// would be refused again.
		e.mu.Lock()
		e.dropped += len(batch)
		e.mu.Unlock()
	default:
		return // transport: kept
	}
	e.mu.Lock()
	e.queue = e.queue[len(batch):]
	if err == nil {
		e.sent += len(batch)
	}
	e.mu.Unlock()
}

// Stats is what the emitter sent and dropped, and what it holds.
func (e *Emitter) Stats() (sent, dropped, queued int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sent, e.dropped, len(e.queue)
}
