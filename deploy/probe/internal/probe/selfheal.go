package probe

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// FaultClass names a kind of local fault.
type FaultClass string

// The fault classes the Local Self-Heal Executor may act on, each with its one bounded action.
// Everything else (a missing session, a quarantined store, a refused policy...) is outside the
// allow-list: the session is marked degraded and the fault escalated to the Gateway.
const (
	FaultBridgeUnreachable FaultClass = "bridge_unreachable" // reconnect
	FaultSandboxExited     FaultClass = "sandbox_exited"     // restart
	FaultStoreUnmounted    FaultClass = "store_unmounted"    // remount
	FaultListenerLost      FaultClass = "listener_lost"      // rebind
	FaultEndpointStale     FaultClass = "endpoint_stale"     // local endpoint refresh
	FaultBootFailed        FaultClass = "boot_failed"        // restart (the boot is retried)
)

// Actions are the only things self-heal can do: each is local to one sandbox or session. There
// is no field that could place, reassign, stop for good, archive, override a policy or approve:
// those belong to the Gateway, and the executor has no way to reach them.
type Actions struct {
	Reconnect       func(context.Context) error
	Restart         func(context.Context) error
	Remount         func(context.Context) error
	Rebind          func(context.Context) error
	RefreshEndpoint func(context.Context) error
}

func (a Actions) of(c FaultClass) (string, func(context.Context) error, bool) {
	switch c {
	case FaultBridgeUnreachable:
		return "reconnect", a.Reconnect, true
	case FaultSandboxExited, FaultBootFailed:
		return "restart", a.Restart, true
	case FaultStoreUnmounted:
		return "remount", a.Remount, true
	case FaultListenerLost:
		return "rebind", a.Rebind, true
	case FaultEndpointStale:
		return "refresh_endpoint", a.RefreshEndpoint, true
	}
	return "", nil, false
}

// Outcome is what the executor did about a fault.
type Outcome string

const (
	Recovered Outcome = "recovered" // the action succeeded
	Retrying  Outcome = "retrying"  // the action failed or is backing off; it will be tried again
	Degraded  Outcome = "degraded"  // outside the allow-list: reported, never acted on
	Escalated Outcome = "escalated" // repeated failure: handed to the Gateway, no more local tries
	// Waiting: nothing was done (backing off, or degraded or escalated before and waiting for the
	// Gateway); nothing new to report.
	Waiting Outcome = "waiting"
)

// Fault is one occurrence of a fault, of one sandbox or session (Scope: "devbox" or
// "devbox/session").
type Fault struct {
	Scope string
	Class FaultClass
	Err   error
}

// HealPolicy bounds self-heal: MaxAttempts failed actions escalate; between attempts the executor
// waits Backoff, doubled after each failure up to MaxBackoff.
type HealPolicy struct {
	MaxAttempts int
	Backoff     time.Duration
	MaxBackoff  time.Duration
}

// SelfHeal is the Local Self-Heal Executor. Its counters are per scope and class, so one
// session's faults never use up another's attempts.
type SelfHeal struct {
	policy HealPolicy
	mu     sync.Mutex
	state  map[healKey]*healState
	counts map[string]int // "<class> <outcome>" → n
}

type healKey struct {
	scope string
	class FaultClass
}

type healState struct {
	failures  int
	next      time.Time
	escalated bool
}

// NewSelfHeal returns an executor with policy.
func NewSelfHeal(p HealPolicy) *SelfHeal {
	return &SelfHeal{policy: p, state: map[healKey]*healState{}, counts: map[string]int{}}
}

// Handle decides about f and, when allowed and due, runs its action from acts. The returned
// string describes what happened, for the event and the audit's recovery trail.
func (h *SelfHeal) Handle(ctx context.Context, f Fault, acts Actions) (Outcome, string) {
	name, act, allowed := acts.of(f.Class)
	k := healKey{f.Scope, f.Class}
	h.mu.Lock()
	st := h.state[k]
	if st == nil {
		st = &healState{}
		h.state[k] = st
	}
	switch {
	case st.escalated:
		h.mu.Unlock()
		return Waiting, fmt.Sprintf("fault %s: reported before; waiting for the gateway", f.Class)
	case !allowed || act == nil:
		st.escalated = true
		h.counts[string(f.Class)+" "+string(Degraded)]++
		h.mu.Unlock()
		return Degraded, fmt.Sprintf("fault %s (%v) is outside the self-heal allow-list: degraded, escalated to the gateway", f.Class, f.Err)
	case time.Now().Before(st.next):
		h.mu.Unlock()
		return Waiting, fmt.Sprintf("fault %s: %s backing off until %v", f.Class, name, st.next.Sub(time.Now()))
	}
	h.mu.Unlock()
	err := act(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.state, k)
		h.counts[string(f.Class)+" "+string(Recovered)]++
		return Recovered, fmt.Sprintf("fault %s: %s succeeded", f.Class, name)
	}
	st.failures++
	if st.failures >= h.policy.MaxAttempts {
		st.escalated = true
		h.counts[string(f.Class)+" "+string(Escalated)]++
		return Escalated, fmt.Sprintf("fault %s: %s failed %d times (last: %v): escalated to the gateway", f.Class, name, st.failures, err)
	}
	wait := h.policy.Backoff << (st.failures - 1)
	if wait > h.policy.MaxBackoff || wait <= 0 {
		wait = h.policy.MaxBackoff
	}
	st.next = time.Now().Add(wait)
	h.counts[string(f.Class)+" "+string(Retrying)]++
	return Retrying, fmt.Sprintf("fault %s: %s failed (%v); attempt %d of %d in %v", f.Class, name, err, st.failures, h.policy.MaxAttempts, wait)
}

// Clear forgets scope's faults (its sandbox was stopped or re-placed by the Gateway).
func (h *SelfHeal) Clear(scope string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.state {
		if k.scope == scope || len(k.scope) > len(scope) && k.scope[:len(scope)+1] == scope+"/" {
			delete(h.state, k)
		}
	}
}

// Counts returns the counters, "<class> <outcome>" → n.
func (h *SelfHeal) Counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.counts))
	for k, v := range h.counts {
		out[k] = v
	}
	return out
}
