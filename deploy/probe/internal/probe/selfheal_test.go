package probe

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

var policy = HealPolicy{MaxAttempts: 3, Backoff: time.Second, MaxBackoff: 4 * time.Second}

// Each allowed class runs its own action, is recovered, and is counted.
func TestSelfHealAllowedClassesRecover(t *testing.T) {
	ran := map[string]int{}
	act := func(name string) func(context.Context) error {
		return func(context.Context) error { ran[name]++; return nil }
	}
	acts := Actions{Reconnect: act("reconnect"), Restart: act("restart"), Remount: act("remount"), Rebind: act("rebind"), RefreshEndpoint: act("refresh")}
	h := NewSelfHeal(policy)
	for _, tc := range []struct {
		class FaultClass
		want  string
	}{
		{FaultBridgeUnreachable, "reconnect"}, {FaultSandboxExited, "restart"}, {FaultStoreUnmounted, "remount"},
		{FaultListenerLost, "rebind"}, {FaultEndpointStale, "refresh"},
	} {
		before := ran[tc.want]
		if o, why := h.Handle(t.Context(), Fault{Scope: "a/s1", Class: tc.class, Err: errors.New("x")}, acts); o != Recovered {
			t.Errorf("%s: %s (%s), want recovered", tc.class, o, why)
		}
		if ran[tc.want] != before+1 {
			t.Errorf("%s did not run %s", tc.class, tc.want)
		}
	}
	want := map[string]int{"bridge_unreachable recovered": 1, "sandbox_exited recovered": 1, "store_unmounted recovered": 1, "listener_lost recovered": 1, "endpoint_stale recovered": 1}
	if d := cmp.Diff(want, h.Counts()); d != "" {
		t.Errorf("counts (-want +got):\n%s", d)
	}
}

// A fault outside the allow-list never runs an action: it degrades and escalates.
func TestSelfHealOutsideAllowListDegrades(t *testing.T) {
	ran := 0
	any := func(context.Context) error { ran++; return nil }
	acts := Actions{Reconnect: any, Restart: any, Remount: any, Rebind: any, RefreshEndpoint: any}
	h := NewSelfHeal(policy)
	for _, c := range []FaultClass{"session_missing", "fd_exhausted", "store_quarantined", "policy_denied", ""} {
		if o, _ := h.Handle(t.Context(), Fault{Scope: "a", Class: c}, acts); o != Degraded {
			t.Errorf("%q: %s, want degraded", c, o)
		}
		if o, _ := h.Handle(t.Context(), Fault{Scope: "a", Class: c}, acts); o != Waiting {
			t.Errorf("%q again: %s, want waiting (reported once, not again at every pass)", c, o)
		}
	}
	if ran != 0 {
		t.Errorf("%d actions ran for faults outside the allow-list", ran)
	}
	// An allowed class whose action this sandbox lacks (nil) is not guessed at either.
	if o, _ := h.Handle(t.Context(), Fault{Scope: "a", Class: FaultStoreUnmounted}, Actions{}); o != Degraded {
		t.Errorf("allowed class without an action: %s, want degraded", o)
	}
}

// Repeated failure backs off (1s, 2s), then escalates at the third failure and never retries.
func TestSelfHealBackoffAndEscalation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Duration
		start := time.Now()
		acts := Actions{Restart: func(context.Context) error { at = append(at, time.Since(start)); return errors.New("still down") }}
		h := NewSelfHeal(policy)
		f := Fault{Scope: "a", Class: FaultSandboxExited}
		var outcomes []Outcome
		for range 12 {
			o, _ := h.Handle(t.Context(), f, acts)
			outcomes = append(outcomes, o)
			time.Sleep(500 * time.Millisecond)
		}
		if d := cmp.Diff([]time.Duration{0, time.Second, 3 * time.Second}, at); d != "" {
			t.Errorf("attempts (-want +got):\n%s", d)
		}
		// Escalated once, at the third failure (t=3s, the 7th call); after it nothing runs.
		want := []Outcome{Retrying, Waiting, Retrying, Waiting, Waiting, Waiting, Escalated, Waiting, Waiting, Waiting, Waiting, Waiting}
		if d := cmp.Diff(want, outcomes); d != "" {
			t.Errorf("outcomes (-want +got):\n%s", d)
		}
		if c := h.Counts(); c["sandbox_exited escalated"] != 1 || c["sandbox_exited retrying"] != 2 {
			t.Errorf("counts %v", c)
		}
	})
}

// One session's failing faults never consume another's attempts.
func TestSelfHealIsolatedPerScope(t *testing.T) {
	h := NewSelfHeal(HealPolicy{MaxAttempts: 1, Backoff: time.Hour, MaxBackoff: time.Hour})
	fail := Actions{Reconnect: func(context.Context) error { return errors.New("down") }}
	ok := Actions{Reconnect: func(context.Context) error { return nil }}
	if o, _ := h.Handle(t.Context(), Fault{Scope: "a/s1", Class: FaultBridgeUnreachable}, fail); o != Escalated {
		t.Fatalf("s1: %s, want escalated", o)
	}
	if o, _ := h.Handle(t.Context(), Fault{Scope: "a/s2", Class: FaultBridgeUnreachable}, ok); o != Recovered {
		t.Errorf("s2 after s1 escalated: %s, want recovered", o)
	}
}

// The executor's actions are exactly the five bounded local ones.
func TestSelfHealHasOnlyLocalActions(t *testing.T) {
	var got []string
	for f := range reflect.TypeFor[Actions]().Fields() {
		got = append(got, f.Name)
	}
	if want := []string{"Reconnect", "Restart", "Remount", "Rebind", "RefreshEndpoint"}; !cmp.Equal(got, want) {
		t.Errorf("Actions fields %v, want exactly %v", got, want)
	}
}
