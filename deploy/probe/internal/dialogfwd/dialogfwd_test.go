package dialogfwd

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
)

// The Probe's own check of what a replica hands down: an answer reaches the appliance only for a
// question this Probe holds for that DevBox, agent and session, and once per answer id. (The
// appliance here is an HTTP stand-in counting calls: what is tested is the forwarder's decision.)
func TestDeliverChecks(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true,"result":{}}`))
	}))
	defer srv.Close()
	f := New(nil, func() int64 { return 1 }, slog.New(slog.DiscardHandler))
	client := rpc.NewClient(srv.URL, "t", srv.Client())
	f.open["q-1"] = &entry{client: client, req: wire.DialogRequest{RequestID: "q-1", DevBox: "alpha", Agent: "main", Session: "s1", Deadline: time.Now().Add(time.Hour)}}
	f.ended = []wire.DialogEnd{{RequestID: "q-2", DevBox: "alpha", Outcome: wire.DialogDefault}, {RequestID: "q-3", DevBox: "alpha", Outcome: wire.DialogCancelled}}
	ok := wire.DialogAnswer{AnswerID: "a-ok", RequestID: "q-1", DevBox: "alpha", Agent: "main", Session: "s1", Choice: "allow", By: "admin:x"}
	for _, tc := range []struct {
		name string
		a    wire.DialogAnswer
		want string
	}{
		{"another session", wire.DialogAnswer{AnswerID: "a1", RequestID: "q-1", DevBox: "alpha", Agent: "main", Session: "s2"}, wire.DeliveredWrong},
		{"another devbox", wire.DialogAnswer{AnswerID: "a2", RequestID: "q-1", DevBox: "beta", Agent: "main", Session: "s1"}, wire.DeliveredWrong},
		{"another agent", wire.DialogAnswer{AnswerID: "a3", RequestID: "q-1", DevBox: "alpha", Agent: "other", Session: "s1"}, wire.DeliveredWrong},
		{"unknown", wire.DialogAnswer{AnswerID: "a4", RequestID: "q-9", DevBox: "alpha", Agent: "main", Session: "s1"}, wire.DeliveredWrong},
		{"timed out", wire.DialogAnswer{AnswerID: "a5", RequestID: "q-2", DevBox: "alpha", Agent: "main", Session: "s1"}, wire.DeliveredLate},
		{"cancelled", wire.DialogAnswer{AnswerID: "a6", RequestID: "q-3", DevBox: "alpha", Agent: "main", Session: "s1"}, wire.DeliveredEnded},
	} {
		if got := f.deliver(context.Background(), tc.a); got.Result != tc.want {
			t.Errorf("%s: %+v, want %s", tc.name, got, tc.want)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the appliance for refused answers", n)
	}
	for range 2 {
		if got := f.deliver(context.Background(), ok); got.Result != wire.DeliveredOK {
			t.Fatalf("the held question's answer: %+v", got)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("one answer id delivered %d times, want once", n)
	}
}
