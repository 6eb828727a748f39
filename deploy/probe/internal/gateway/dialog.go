package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// The dialog relay. Content (prompt, options, default, the answer's choice) is held in this
// replica's memory alone — the hub, fed by each Probe's dialog stream — and the store gets
// metadata (wire.DialogRecord) and audit records that never name it.
//
// Replicas: every Probe streams to every replica (wire.NewDialogClients), so each replica holds
// the content of every open question of the Probes that reach it, and reaches each such Probe
// with an answer over that Probe's own stream. No replica forwards to another, and no route to a
// content holder is kept anywhere: a replica that a Probe does not reach answers 503, and the
// clients move on to the next replica.

const (
	prefixDialog = "/allox/dialog/"
	// dialogStreamFresh is how recent a host's last sync must be for this replica to count as
	// reaching it (a sync waits at most maxDialogWait).
	dialogStreamFresh = 40 * time.Second
	maxDialogWait     = 25 * time.Second
	// maxDialogOpen bounds the open questions a host may hold on a replica.
	maxDialogOpen = 256
	// answerWait bounds how long a person's answer waits for the Probe's delivery.
	answerWait = 20 * time.Second
	// expiredAfter is how long past its deadline an open record may stay without an outcome from
	// its Probe before it counts as expired.
	expiredAfter = 30 * time.Second
)

// ErrLate is an answer that came after its question's deadline; ErrUndelivered one its Probe
// did not confirm in time (not retried on another replica: the first may still arrive).
var (
	ErrLate        = errors.New("late")
	ErrUndelivered = errors.New("undelivered")
)

type dialogHub struct {
	mu    sync.Mutex
	hosts map[string]*hostDialog
}

type hostDialog struct {
	epoch   int64
	open    map[string]wire.DialogRequest // content, in memory only
	synced  time.Time
	known   map[string]bool // records this replica knows to exist in the store
	applied map[string]bool // endings this replica wrote or saw written
	queue   []wire.DialogAnswer
	waiters map[string]chan wire.DialogResult // answer id → the person waiting
	kick    chan struct{}                     // closed and replaced when an answer is queued
}

func (h *dialogHub) host(name string) *hostDialog {
	if h.hosts == nil {
		h.hosts = map[string]*hostDialog{}
	}
	hd := h.hosts[name]
	if hd == nil {
		hd = &hostDialog{open: map[string]wire.DialogRequest{}, known: map[string]bool{}, applied: map[string]bool{},
			waiters: map[string]chan wire.DialogResult{}, kick: make(chan struct{})}
		h.hosts[name] = hd
	}
	return hd
}

func dialogKey(id string) string { return prefixDialog + id }

// DialogSync is one turn of a Probe's dialog stream: it takes what the Probe holds open (the
// content into memory, new requests' metadata into the store), the endings and the delivery
// results, then waits up to s.Wait for an answer to hand down.
func (g *Gateway) DialogSync(ctx context.Context, s wire.DialogSync) (wire.DialogAnswers, error) {
	if _, err := g.current(ctx, s.Host, s.Epoch); err != nil {
		return wire.DialogAnswers{}, err
	}
	if len(s.Open) > maxDialogOpen {
		return wire.DialogAnswers{}, fmt.Errorf("%w: open: %d questions, at most %d per host", ErrInvalid, len(s.Open), maxDialogOpen)
	}
	placed := map[string]bool{}
	isPlaced := func(devbox string) bool {
		if v, ok := placed[devbox]; ok {
			return v
		}
		var p wire.Placement
		rev, err := g.getJSON(ctx, prefixPlacement+devbox, &p)
		placed[devbox] = err == nil && rev != 0 && p.Host == s.Host && p.Epoch == s.Epoch
		return placed[devbox]
	}
	open := map[string]wire.DialogRequest{}
	for i, r := range s.Open {
		if !strings.HasPrefix(r.RequestID, "q-") || r.DevBox == "" || r.Session == "" {
			return wire.DialogAnswers{}, fmt.Errorf("%w: open.%d: a request needs request_id (q-...), devbox and session", ErrInvalid, i)
		}
		if isPlaced(r.DevBox) { // a Probe speaks only for the DevBoxes placed on it
			open[r.RequestID] = r
		}
	}
	g.dialog.mu.Lock()
	hd := g.dialog.host(s.Host)
	if hd.epoch != s.Epoch {
		hd.epoch, hd.queue = s.Epoch, nil
	}
	hd.open, hd.synced = open, time.Now()
	var fresh []wire.DialogRequest
	for id, r := range open {
		if !hd.known[id] {
			fresh = append(fresh, r)
		}
	}
	var ends []wire.DialogEnd
	for _, e := range s.Ended {
		if !hd.applied[e.RequestID] {
			ends = append(ends, e)
		}
	}
	for _, res := range s.Results {
		if w := hd.waiters[res.AnswerID]; w != nil {
			w <- res
			delete(hd.waiters, res.AnswerID)
		}
		hd.queue = slices.DeleteFunc(hd.queue, func(a wire.DialogAnswer) bool { return a.AnswerID == res.AnswerID })
	}
	g.dialog.mu.Unlock()

	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Asked.Before(fresh[j].Asked) })
	for _, r := range fresh {
		created, err := g.openRecord(ctx, s.Host, s.Epoch, r)
		if err != nil {
			return wire.DialogAnswers{}, err
		}
		g.dialog.mu.Lock()
		hd.known[r.RequestID] = true
		g.dialog.mu.Unlock()
		if created { // the replica that recorded it applies the policy: one decision per request
			g.applyPolicy(ctx, s.Host, r)
		}
	}
	for _, e := range ends {
		if err := g.endRecord(ctx, s.Host, e); err != nil {
			return wire.DialogAnswers{}, err
		}
		g.dialog.mu.Lock()
		if len(hd.applied) > 4096 {
			hd.applied = map[string]bool{}
		}
		hd.applied[e.RequestID] = true
		delete(hd.known, e.RequestID)
		g.dialog.mu.Unlock()
	}

	wait := min(s.Wait, maxDialogWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		g.dialog.mu.Lock()
		q, kick := slices.Clone(hd.queue), hd.kick
		g.dialog.mu.Unlock()
		if len(q) > 0 || wait <= 0 {
			return wire.DialogAnswers{Answers: q}, nil
		}
		select {
		case <-kick:
		case <-timer.C:
			return wire.DialogAnswers{Answers: []wire.DialogAnswer{}}, nil
		case <-ctx.Done():
			return wire.DialogAnswers{}, ctx.Err()
		}
	}
}

// openRecord writes a new request's metadata unless it exists; whether this call wrote it.
func (g *Gateway) openRecord(ctx context.Context, host string, epoch int64, r wire.DialogRequest) (bool, error) {
	rec := wire.DialogRecord{RequestID: r.RequestID, Host: host, Epoch: epoch, DevBox: r.DevBox, Agent: r.Agent, Session: r.Session, RunID: r.RunID,
		Kind: r.Kind, Source: r.Source, Asked: r.Asked, Deadline: r.Deadline, PromptBytes: len(r.Prompt), Options: len(r.Options), Outcome: wire.DialogOpen}
	_, err := g.commit(ctx, []clientv3.Cmp{absent(dialogKey(r.RequestID))}, putJSON(dialogKey(r.RequestID), rec),
		auditOp(audit.Record{Actor: "probe:" + host, Action: "dialog.open", Object: "session/" + r.DevBox + "/" + r.Session, Host: host, Epoch: epoch,
			Reason: fmt.Sprintf("request %s, %s, %d prompt bytes, %d options, deadline %s", r.RequestID, r.Kind, len(r.Prompt), len(r.Options), r.Deadline.UTC().Format(time.RFC3339))}))
	if errors.Is(err, ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// endRecord records how a request ended, once, from the host that holds it.
func (g *Gateway) endRecord(ctx context.Context, host string, e wire.DialogEnd) error {
	for {
		var rec wire.DialogRecord
		rev, err := g.getJSON(ctx, dialogKey(e.RequestID), &rec)
		if err != nil || rev == 0 || rec.Host != host || rec.Outcome != wire.DialogOpen {
			return err // unknown, another host's, or ended already
		}
		rec.Outcome, rec.By, rec.AnswerBytes, rec.Ended = e.Outcome, e.By, e.AnswerBytes, e.At
		why := fmt.Sprintf("request %s %s", e.RequestID, e.Outcome)
		if e.By != "" {
			why += " by " + e.By
		}
		_, err = g.commit(ctx, []clientv3.Cmp{unchanged(dialogKey(e.RequestID), rev)}, putJSON(dialogKey(e.RequestID), rec),
			auditOp(audit.Record{Actor: "probe:" + host, Action: "dialog." + e.Outcome, Object: "session/" + rec.DevBox + "/" + rec.Session, Host: host,
				Reason: fmt.Sprintf("%s, %d answer bytes", why, e.AnswerBytes)}))
		if !errors.Is(err, ErrConflict) {
			return err
		}
	}
}

// applyPolicy answers r with the first of its session's dialog rules that matches, if any.
func (g *Gateway) applyPolicy(ctx context.Context, host string, r wire.DialogRequest) {
	var d spec.DevBox
	if rev, err := g.getJSON(ctx, prefixDevBox+r.DevBox, &d); err != nil || rev == 0 {
		return
	}
	s, ok := d.Session(r.Session)
	if !ok {
		return
	}
	for _, rule := range s.DialogRules {
		if !rule.Match(r.Kind, r.Prompt) || (len(r.Options) > 0 && !slices.Contains(r.Options, rule.Answer)) {
			continue
		}
		g.enqueue(host, wire.DialogAnswer{AnswerID: "a-" + wire.NewTraceID()[:16], RequestID: r.RequestID, DevBox: r.DevBox, Agent: r.Agent,
			Session: r.Session, Choice: rule.Answer, By: "policy:" + r.DevBox + "/" + r.Session + "/" + rule.Name, TraceID: wire.NewTraceID()}, nil)
		return
	}
}

// enqueue queues a for host's Probe; the result goes to w (nil: nobody waits).
func (g *Gateway) enqueue(host string, a wire.DialogAnswer, w chan wire.DialogResult) {
	g.dialog.mu.Lock()
	defer g.dialog.mu.Unlock()
	hd := g.dialog.host(host)
	hd.queue = append(hd.queue, a)
	if w != nil {
		hd.waiters[a.AnswerID] = w
	}
	close(hd.kick)
	hd.kick = make(chan struct{})
}

// DialogList lists the open requests (all: and the ended ones), with their content where this
// replica holds it.
func (g *Gateway) DialogList(ctx context.Context, all bool) ([]wire.DialogItem, error) {
	recs, _, err := list[wire.DialogRecord](ctx, g.cli, prefixDialog)
	if err != nil {
		return nil, err
	}
	out := []wire.DialogItem{}
	for _, kv := range recs {
		rec := kv.Val
		if rec.Outcome == wire.DialogOpen && time.Now().After(rec.Deadline.Add(expiredAfter)) {
			rec = g.expire(ctx, kv)
		}
		if rec.Outcome != wire.DialogOpen && !all {
			continue
		}
		it := wire.DialogItem{DialogRecord: rec}
		if rec.Outcome == wire.DialogOpen {
			if c, ok := g.content(rec); ok {
				it.Content = &wire.DialogContent{Prompt: c.Prompt, Options: c.Options, Default: c.Default}
			} else {
				it.Holder = fmt.Sprintf("host %s's Probe does not stream its dialog to this replica (%s): ask another", rec.Host, g.cfg.Replica)
			}
		}
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Asked.Before(out[j].Asked) })
	return out, nil
}

// expire marks an open record whose Probe never reported its outcome.
func (g *Gateway) expire(ctx context.Context, kv kv[wire.DialogRecord]) wire.DialogRecord {
	rec := kv.Val
	rec.Outcome, rec.Ended = wire.DialogExpired, time.Now().UTC()
	if _, err := g.commit(ctx, []clientv3.Cmp{unchanged(kv.Key, kv.ModRev)}, putJSON(kv.Key, rec),
		auditOp(audit.Record{Actor: "gateway:" + g.cfg.Replica, Action: "dialog.expired", Object: "session/" + rec.DevBox + "/" + rec.Session, Host: rec.Host,
			Reason: fmt.Sprintf("request %s: no outcome from its Probe %s past its deadline", rec.RequestID, expiredAfter)})); err != nil {
		return kv.Val
	}
	return rec
}

// content is rec's content if this replica holds it from a fresh stream of rec's host.
func (g *Gateway) content(rec wire.DialogRecord) (wire.DialogRequest, bool) {
	g.dialog.mu.Lock()
	defer g.dialog.mu.Unlock()
	hd := g.dialog.hosts[rec.Host]
	if hd == nil || time.Since(hd.synced) > dialogStreamFresh {
		return wire.DialogRequest{}, false
	}
	r, ok := hd.open[rec.RequestID]
	return r, ok && r.DevBox == rec.DevBox && r.Session == rec.Session
}

// DialogAnswer delivers a person's answer through the Probe that holds the request and returns
// the request's record once the appliance took it. An unknown id, another session's id, a choice
// that is not an option, and an answer after the deadline (recorded as late) are refused.
func (g *Gateway) DialogAnswer(ctx context.Context, actor string, req wire.DialogAnswerRequest, traceID string) (wire.DialogRecord, error) {
	switch {
	case req.DevBox == "" || req.Session == "":
		return wire.DialogRecord{}, fmt.Errorf("%w: devbox and session: name the session the request is of (--devbox, --session), so that an id of another session is refused", ErrInvalid)
	case req.RequestID == "":
		return wire.DialogRecord{}, fmt.Errorf("%w: request_id: name the request (gateway dialog ls lists them)", ErrInvalid)
	case req.Choice == "":
		return wire.DialogRecord{}, fmt.Errorf("%w: choice: give the answer", ErrInvalid)
	}
	var rec wire.DialogRecord
	rev, err := g.getJSON(ctx, dialogKey(req.RequestID), &rec)
	switch {
	case err != nil:
		return rec, err
	case rev == 0:
		return rec, fmt.Errorf("%w: no dialog request %q: gateway dialog ls lists the open ones", ErrNotFound, req.RequestID)
	case rec.DevBox != req.DevBox || rec.Session != req.Session:
		return wire.DialogRecord{}, fmt.Errorf("%w: request %q is not a request of session %s/%s: answer it with its own devbox and session", ErrDenied, req.RequestID, req.DevBox, req.Session)
	case rec.Outcome == wire.DialogDefault || rec.Outcome == wire.DialogExpired || (rec.Outcome == wire.DialogOpen && time.Now().After(rec.Deadline)):
		return g.late(ctx, actor, rec, traceID)
	case rec.Outcome != wire.DialogOpen:
		return rec, fmt.Errorf("%w: request %q was %s already (by %s at %s)", ErrConflict, req.RequestID, rec.Outcome, cmpOr(rec.By, "nobody"), rec.Ended.UTC().Format(time.RFC3339))
	}
	c, ok := g.content(rec)
	if !ok {
		return rec, fmt.Errorf("this replica (%s) holds no dialog stream from host %s: its Probe streams to other replicas; ask one of them", g.cfg.Replica, rec.Host)
	}
	if len(c.Options) > 0 && !slices.Contains(c.Options, req.Choice) {
		return rec, fmt.Errorf("%w: choice %q is not one of the request's options %q", ErrInvalid, req.Choice, c.Options)
	}
	w := make(chan wire.DialogResult, 1)
	a := wire.DialogAnswer{AnswerID: "a-" + wire.NewTraceID()[:16], RequestID: rec.RequestID, DevBox: rec.DevBox, Agent: rec.Agent, Session: rec.Session,
		Choice: req.Choice, By: actor, TraceID: traceID}
	g.enqueue(rec.Host, a, w)
	timer := time.NewTimer(min(answerWait, max(time.Until(rec.Deadline)+5*time.Second, time.Second)))
	defer timer.Stop()
	var res wire.DialogResult
	select {
	case res = <-w:
	case <-timer.C:
		g.withdraw(rec.Host, a.AnswerID)
		return rec, fmt.Errorf("%w: host %s's Probe did not deliver the answer in time; the request stays open until its deadline %s", ErrUndelivered, rec.Host, rec.Deadline.UTC().Format(time.RFC3339))
	case <-ctx.Done():
		g.withdraw(rec.Host, a.AnswerID)
		return rec, ctx.Err()
	}
	switch res.Result {
	case wire.DeliveredOK:
		rec.Outcome, rec.By, rec.AnswerBytes = wire.DialogAnswered, actor, len(req.Choice)
		return rec, nil
	case wire.DeliveredLate:
		return g.late(ctx, actor, rec, traceID)
	case wire.DeliveredEnded:
		return rec, fmt.Errorf("%w: request %q ended before the answer reached it: %s", ErrConflict, rec.RequestID, res.Message)
	case wire.DeliveredWrong:
		return rec, fmt.Errorf("%w: host %s's Probe refused the answer: %s", ErrDenied, rec.Host, res.Message)
	}
	return rec, fmt.Errorf("%w: host %s's Probe could not deliver the answer: %s", ErrUndelivered, rec.Host, res.Message)
}

func (g *Gateway) withdraw(host, answerID string) {
	g.dialog.mu.Lock()
	defer g.dialog.mu.Unlock()
	hd := g.dialog.host(host)
	delete(hd.waiters, answerID)
	hd.queue = slices.DeleteFunc(hd.queue, func(a wire.DialogAnswer) bool { return a.AnswerID == answerID })
}

// late records an answer refused for coming after the deadline and returns ErrLate.
func (g *Gateway) late(ctx context.Context, actor string, rec wire.DialogRecord, traceID string) (wire.DialogRecord, error) {
	for {
		var cur wire.DialogRecord
		rev, err := g.getJSON(ctx, dialogKey(rec.RequestID), &cur)
		if err != nil || rev == 0 {
			break
		}
		cur.Late++
		_, err = g.commit(ctx, []clientv3.Cmp{unchanged(dialogKey(rec.RequestID), rev)}, putJSON(dialogKey(rec.RequestID), cur),
			auditOp(audit.Record{Actor: actor, Action: "dialog.late", Object: "session/" + cur.DevBox + "/" + cur.Session, Host: cur.Host, TraceID: traceID,
				Reason: fmt.Sprintf("request %s: an answer after its deadline %s, refused", cur.RequestID, cur.Deadline.UTC().Format(time.RFC3339))}))
		if err == nil {
			rec = cur
			break
		}
		if !errors.Is(err, ErrConflict) {
			return rec, err
		}
	}
	return rec, fmt.Errorf("%w: request %q passed its deadline %s and took its default: an answer after the timeout is refused (recorded as late)",
		ErrLate, rec.RequestID, rec.Deadline.UTC().Format(time.RFC3339))
}
