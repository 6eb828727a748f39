package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// gateway is a fake Gateway for the guard's logic: it grants increasing epochs, counts renewals
// with their times, and can be partitioned (every call fails) or forget the lease (ErrLost).
type gateway struct {
	mu          sync.Mutex
	epoch       int64
	partitioned bool
	lost        bool
	renewals    []time.Duration // since start
	start       time.Time
}

const (
	renewEvery = 10 * time.Second
	stopAfter  = 30 * time.Second
	lostAfter  = 40 * time.Second
)

func (g *gateway) grant() Grant {
	return Grant{Epoch: g.epoch, RenewEvery: renewEvery, StopAfter: stopAfter, LostAfter: lostAfter}
}

func (g *gateway) Register(context.Context) (Grant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.partitioned {
		return Grant{}, errors.New("connection refused")
	}
	g.epoch += 100
	g.lost = false
	return g.grant(), nil
}

func (g *gateway) Renew(ctx context.Context, epoch int64) (Grant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.partitioned:
		return Grant{}, errors.New("connection refused")
	case g.lost || epoch != g.epoch:
		return Grant{}, ErrLost
	}
	g.renewals = append(g.renewals, time.Since(g.start))
	return g.grant(), nil
}

func (g *gateway) set(f func(*gateway)) { g.mu.Lock(); f(g); g.mu.Unlock() }

// fencer records fences and unfences with their times.
type fencer struct {
	mu     sync.Mutex
	start  time.Time
	events []string
	at     []time.Duration
}

func (f *fencer) Fence(reason string) { f.add("fence: " + reason) }
func (f *fencer) Unfence(epoch int64) { f.add("unfence") }
func (f *fencer) add(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, s)
	f.at = append(f.at, time.Since(f.start))
}

func (f *fencer) got() ([]string, []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...), append([]time.Duration(nil), f.at...)
}

func run(t *testing.T) (*Guard, *gateway, *fencer, context.CancelFunc) {
	gw := &gateway{start: time.Now()}
	f := &fencer{start: time.Now()}
	g := New(gw, f, time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	synctest.Wait()
	return g, gw, f, cancel
}

func TestRenewCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, gw, f, _ := run(t)
		time.Sleep(45 * time.Second) // fake time: four renewals
		synctest.Wait()
		gw.mu.Lock()
		got := gw.renewals
		gw.mu.Unlock()
		want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("renewals (-want +got):\n%s", d)
		}
		if err := g.Admit(100); err != nil {
			t.Errorf("Admit(current epoch) with renewals on time: %v", err)
		}
		if ev, _ := f.got(); !cmp.Equal(ev, []string{"unfence"}) {
			t.Errorf("fencer saw %q, want one unfence", ev)
		}
	})
}

func TestSelfFenceAtStopAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, gw, f, _ := run(t)
		time.Sleep(15 * time.Second) // renewed at 10s
		gw.set(func(g *gateway) { g.partitioned = true })
		// Last renewal at 10s: the fence must come at 10s + stop_after = 40s, no later.
		time.Sleep(40*time.Second - 15*time.Second - time.Nanosecond)
		synctest.Wait()
		if err := g.Admit(100); err != nil {
			t.Fatalf("Admit just before stop_after: %v, want admitted", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		ev, at := f.got()
		if d := cmp.Diff([]string{"unfence", "fence: no renewal within stop_after"}, ev); d != "" {
			t.Fatalf("fencer (-want +got):\n%s", d)
		}
		if at[1] != 40*time.Second {
			t.Errorf("fenced at %v, want 40s (last renewal 10s + stop_after 30s)", at[1])
		}
		if at[1] >= 10*time.Second+lostAfter {
			t.Errorf("fenced at %v, not before the gateway's lost_after at %v", at[1], 10*time.Second+lostAfter)
		}
		if err := g.Admit(100); !errors.Is(err, ErrFenced) {
			t.Errorf("Admit after stop_after = %v, want ErrFenced", err)
		}
		// Healing the partition brings a new epoch, never the old one back.
		gw.set(func(g *gateway) { g.partitioned = false })
		time.Sleep(time.Minute)
		synctest.Wait()
		if err := g.Admit(100); !errors.Is(err, ErrStaleEpoch) {
			t.Errorf("Admit(old epoch) after re-registering = %v, want ErrStaleEpoch", err)
		}
		if g.Epoch() <= 100 {
			t.Errorf("epoch after the partition = %d, want > 100", g.Epoch())
		}
	})
}

func TestLostLeaseFencesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, gw, f, _ := run(t)
		gw.set(func(g *gateway) { g.lost = true; g.epoch += 1 }) // another registration took it
		time.Sleep(renewEvery)
		synctest.Wait()
		ev, at := f.got()
		if len(ev) < 3 || ev[1] != "fence: the gateway no longer holds this lease" || at[1] != renewEvery {
			t.Fatalf("fencer = %q at %v, want a fence at the first renewal (10s), then an unfence", ev, at)
		}
		if g.Epoch() != 201 {
			t.Errorf("epoch = %d, want the new registration's 201", g.Epoch())
		}
	})
}

// A Probe paused (SIGSTOP, a VM freeze) longer than the lease must not act on its old epoch when
// it resumes, even before its own timer has had a chance to fire.
func TestPauseLongerThanLeaseRefusesStaleEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw := &gateway{start: time.Now()}
		f := &fencer{start: time.Now()}
		g := New(gw, f, time.Second)
		grant, err := g.register(t.Context()) // no renew loop: the process is "paused"
		if err != nil {
			t.Fatal(err)
		}
		g.stopTimer() // the pause also froze the timer
		time.Sleep(lostAfter + time.Second)
		if err := g.Admit(grant.Epoch); !errors.Is(err, ErrFenced) {
			t.Errorf("Admit after a pause longer than the lease = %v, want ErrFenced", err)
		}
		if err := g.Admit(grant.Epoch + 1); !errors.Is(err, ErrFenced) {
			t.Errorf("Admit(a newer epoch the probe does not hold) = %v, want ErrFenced", err)
		}
	})
}

func TestAdmitRefusesOtherEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _, _, _ := run(t)
		for _, tc := range []struct {
			name  string
			epoch int64
			want  error
		}{
			{"current", 100, nil},
			{"older", 99, ErrStaleEpoch},
			{"newer than held", 101, ErrStaleEpoch},
			{"zero", 0, ErrStaleEpoch},
		} {
			if err := g.Admit(tc.epoch); !errors.Is(err, tc.want) {
				t.Errorf("%s: Admit(%d) = %v, want %v", tc.name, tc.epoch, err, tc.want)
			}
		}
	})
}

func TestRenewalAfterFenceDoesNotUnfence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw := &gateway{start: time.Now()}
		g := New(gw, &fencer{start: time.Now()}, time.Second)
		grant, _ := g.register(t.Context())
		time.Sleep(stopAfter)
		synctest.Wait()
		if g.takeRenewal(grant.Epoch, grant) {
			t.Error("a renewal that arrived after the self-fence lifted it; only a new registration may")
		}
		if err := g.Admit(grant.Epoch); !errors.Is(err, ErrFenced) {
			t.Errorf("Admit = %v, want ErrFenced", err)
		}
		g.stopTimer()
	})
}

func TestGrantValidate(t *testing.T) {
	ok := Grant{Epoch: 1, RenewEvery: renewEvery, StopAfter: stopAfter, LostAfter: lostAfter}
	for _, tc := range []struct {
		name string
		edit func(*Grant)
		bad  bool
	}{
		{"ok", func(*Grant) {}, false},
		{"no epoch", func(g *Grant) { g.Epoch = 0 }, true},
		{"renew past stop", func(g *Grant) { g.RenewEvery = stopAfter }, true},
		{"stop not before lost", func(g *Grant) { g.StopAfter = lostAfter }, true},
	} {
		g := ok
		tc.edit(&g)
		if err := g.Validate(); (err != nil) != tc.bad {
			t.Errorf("%s: Validate = %v, want error %v", tc.name, err, tc.bad)
		}
	}
}

func TestLedgerDuplicatesRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLedger[int](2)
		var runs atomic.Int32
		release := make(chan struct{})
		fn := func() (int, error) { runs.Add(1); <-release; return 7, nil }
		var wg sync.WaitGroup
		dups := make([]bool, 5)
		for i := range dups {
			wg.Go(func() { _, _, dups[i] = l.Do("intent-1", fn) })
		}
		synctest.Wait()
		close(release)
		wg.Wait()
		if runs.Load() != 1 {
			t.Errorf("intent-1 ran %d times, want once", runs.Load())
		}
		n := 0
		for _, d := range dups {
			if !d {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d calls were not duplicates, want 1", n)
		}
		if res, _, dup := l.Do("intent-1", fn); res != 7 || !dup {
			t.Errorf("replayed intent-1 = %d, dup %v; want 7, true", res, dup)
		}
		l.Do("intent-2", func() (int, error) { return 2, nil })
		l.Do("intent-3", func() (int, error) { return 3, nil })
		if _, _, dup := l.Do("intent-1", func() (int, error) { return 1, nil }); dup {
			t.Error("the ledger kept more ids than its bound")
		}
	})
}
