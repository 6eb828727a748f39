// Package dialogfwd is the Probe's Dialog Forwarder, its dialog channel: it watches the open
// questions of every Worker Sandbox the Probe runs (the appliance's dialog.pending, long-polled
// on its host listener), forwards them with their request ids, sessions, kinds and times to every
// Gateway replica over a dialog stream per replica, and delivers the answers the replicas hand
// down (dialog.answer), after checking that each names a question this Probe holds for that
// DevBox and session.
//
// Forward-only, metadata-only: a question's content — prompt, options, default, the answer's
// choice — is held here in memory while the question is open and never written: not to the
// Probe's state directory, not to a log, not into an event (events go to the Gateway's audit).
// What a delivery failure reports says which field or code, never the value.
package dialogfwd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/lease"
	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
	"github.com/allox-os/allox/internal/rpc"
)

// The appliance's dialog actions (services/internal/dialog).
const (
	actionPending = "dialog.pending"
	actionAnswer  = "dialog.answer"
)

const (
	pendingWait = 25 // seconds an appliance's dialog.pending waits
	syncWait    = 20 * time.Second
	maxEnded    = 256
	maxResults  = 1024
)

// request and ended are what the appliance's dialog.pending answers.
type request struct {
	RequestID string    `json:"request_id"`
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	RunID     string    `json:"run_id"`
	Asked     time.Time `json:"asked"`
	Deadline  time.Time `json:"deadline"`
	Kind      string    `json:"kind"`
	Prompt    string    `json:"prompt"`
	Options   []string  `json:"options"`
	Default   string    `json:"default"`
	Source    string    `json:"source"`
}

type ended struct {
	Generation  int64     `json:"generation"`
	RequestID   string    `json:"request_id"`
	Outcome     string    `json:"outcome"`
	By          string    `json:"by"`
	AnswerBytes int       `json:"answer_bytes"`
	At          time.Time `json:"at"`
}

type pendingReply struct {
	Requests   []request `json:"requests"`
	Ended      []ended   `json:"ended"`
	Generation int64     `json:"generation"`
	Now        time.Time `json:"now"`
}

// entry is an open question this Probe holds.
type entry struct {
	req    wire.DialogRequest // content: memory only
	client *rpc.Client        // its appliance
	gen    int64              // the watch that saw it
}

// Forwarder is the dialog channel.
type Forwarder struct {
	streams []*wire.DialogClient
	epoch   func() int64
	log     *slog.Logger

	mu        sync.Mutex
	open      map[string]*entry // by request id
	ended     []wire.DialogEnd  // the last maxEnded endings
	delivered map[string]wire.DialogResult
	results   [][]wire.DialogResult // per stream: results not yet sent
	changed   chan struct{}
	watchGen  int64
}

// New returns the forwarder streaming to every replica of streams; epoch is the Probe's.
func New(streams []*wire.DialogClient, epoch func() int64, log *slog.Logger) *Forwarder {
	return &Forwarder{streams: streams, epoch: epoch, log: log, open: map[string]*entry{}, delivered: map[string]wire.DialogResult{},
		results: make([][]wire.DialogResult, len(streams)), changed: make(chan struct{})}
}

// Name is the channel's name in the Probe's capabilities.
func (f *Forwarder) Name() string { return "dialog" }

// Run keeps a dialog stream to every replica until ctx ends.
func (f *Forwarder) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range f.streams {
		wg.Go(func() { f.stream(ctx, i) })
	}
	wg.Wait()
}

// Attach watches the questions of devbox's sandbox until ctx ends or the sandbox does.
func (f *Forwarder) Attach(ctx context.Context, devbox string, sb probe.Sandbox, _ func(probe.Fault)) {
	f.mu.Lock()
	f.watchGen++
	gen := f.watchGen
	f.mu.Unlock()
	client := rpc.NewClient(sb.Endpoint(), sb.Token(), &http.Client{Timeout: (pendingWait + 30) * time.Second, Transport: &http.Transport{Proxy: nil}})
	go func() {
		defer f.forget(devbox, gen)
		f.watch(ctx, devbox, sb, client, gen)
	}()
}

func (f *Forwarder) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// forget drops what the watch gen of devbox held.
func (f *Forwarder) forget(devbox string, gen int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, e := range f.open {
		if e.req.DevBox == devbox && e.gen == gen {
			delete(f.open, id)
		}
	}
	f.signal()
}

func (f *Forwarder) watch(ctx context.Context, devbox string, sb probe.Sandbox, client *rpc.Client, gen int64) {
	var since int64
	unsupported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-sb.Done():
			return
		default:
		}
		var res pendingReply
		err := client.Call(ctx, actionPending, map[string]any{"wait": pendingWait, "since": since}, &res)
		if err != nil {
			var re *rpc.Error
			if errors.As(err, &re) && (re.Code == rpc.CodeUnsupported || re.Code == rpc.CodeUnknownAction || re.Code == rpc.CodeInvalidParams) {
				if !unsupported {
					f.log.Warn("dialog: the appliance has no dialog (build it with plugins = [\"dialog\"] and sandbox { dialog = true })", "devbox", devbox, "code", string(re.Code))
				}
				unsupported = true
				sleep(ctx, 30*time.Second)
			} else {
				sleep(ctx, time.Second)
			}
			continue
		}
		unsupported = false
		f.update(devbox, client, gen, res)
		since = res.Generation
	}
}

// update takes one dialog.pending reply of devbox's appliance.
func (f *Forwarder) update(devbox string, client *rpc.Client, gen int64, res pendingReply) {
	now := time.Now().UTC()
	skew := now.Sub(res.Now) // host clock minus the appliance's
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range res.Requests {
		seen[r.RequestID] = true
		if e := f.open[r.RequestID]; e != nil && e.req.DevBox == devbox {
			e.gen = gen
			continue // its times stay as first placed
		}
		f.open[r.RequestID] = &entry{client: client, gen: gen, req: wire.DialogRequest{RequestID: r.RequestID, DevBox: devbox, Agent: r.AgentID,
			Session: r.SessionID, RunID: r.RunID, Kind: r.Kind, Source: r.Source, Asked: r.Asked.Add(skew), Deadline: r.Deadline.Add(skew),
			Prompt: r.Prompt, Options: r.Options, Default: r.Default}}
	}
	for id, e := range f.open {
		if e.req.DevBox == devbox && !seen[id] {
			delete(f.open, id)
		}
	}
	for _, e := range res.Ended { // the appliance gives only those after since
		outcome := e.Outcome
		if outcome == "timeout" {
			outcome = wire.DialogDefault
		}
		f.ended = append(f.ended, wire.DialogEnd{RequestID: e.RequestID, DevBox: devbox, Outcome: outcome, By: e.By, AnswerBytes: e.AnswerBytes, At: e.At.Add(skew)})
	}
	if len(f.ended) > maxEnded {
		f.ended = f.ended[len(f.ended)-maxEnded:]
	}
	f.signal()
}

// stream is the dialog stream to replica i.
func (f *Forwarder) stream(ctx context.Context, i int) {
	c := f.streams[i]
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		epoch := f.epoch()
		f.mu.Lock()
		changed := f.changed
		s := wire.DialogSync{Epoch: epoch, Open: []wire.DialogRequest{}, Ended: append([]wire.DialogEnd(nil), f.ended...),
			Results: append([]wire.DialogResult(nil), f.results[i]...), Wait: syncWait}
		for _, e := range f.open {
			s.Open = append(s.Open, e.req)
		}
		f.mu.Unlock()
		if epoch == 0 { // fenced: nothing goes up, nothing is answered
			select {
			case <-ctx.Done():
			case <-changed:
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() { // what this Probe holds changed: send it now, not after the wait
			select {
			case <-changed:
				cancel()
			case <-stop:
			}
		}()
		ans, err := c.Sync(sctx, s)
		close(stop)
		cancel()
		if err != nil {
			if ctx.Err() != nil || sctx.Err() != nil {
				continue
			}
			if !errors.Is(err, lease.ErrLost) {
				f.log.Debug("dialog stream", "gateway", c.Endpoint, "error", err.Error())
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		f.mu.Lock()
		f.results[i] = f.results[i][len(s.Results):]
		f.mu.Unlock()
		for _, a := range ans.Answers {
			res := f.deliver(ctx, a)
			f.mu.Lock()
			f.results[i] = append(f.results[i], res)
			if over := len(f.results[i]) - maxResults; over > 0 {
				f.results[i] = f.results[i][over:]
			}
			f.mu.Unlock()
		}
	}
}

// deliver answers a's question on its appliance, once per answer id.
func (f *Forwarder) deliver(ctx context.Context, a wire.DialogAnswer) wire.DialogResult {
	f.mu.Lock()
	if r, ok := f.delivered[a.AnswerID]; ok {
		f.mu.Unlock()
		return r
	}
	e := f.open[a.RequestID]
	var end *wire.DialogEnd
	for i := range f.ended {
		if f.ended[i].RequestID == a.RequestID && f.ended[i].DevBox == a.DevBox {
			end = &f.ended[i]
		}
	}
	f.mu.Unlock()
	res := wire.DialogResult{AnswerID: a.AnswerID}
	switch {
	case e == nil && end != nil && end.Outcome == wire.DialogDefault:
		res.Result, res.Message = wire.DeliveredLate, "the request took its default at its deadline"
	case e == nil && end != nil:
		res.Result, res.Message = wire.DeliveredEnded, "the request was "+end.Outcome
	case e == nil:
		res.Result, res.Message = wire.DeliveredWrong, fmt.Sprintf("this Probe holds no open request %s", a.RequestID)
	case e.req.DevBox != a.DevBox || e.req.Session != a.Session || e.req.Agent != a.Agent:
		res.Result, res.Message = wire.DeliveredWrong, fmt.Sprintf("request %s is not of session %s/%s", a.RequestID, a.DevBox, a.Session)
	default:
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := e.client.Call(cctx, actionAnswer, map[string]any{"request_id": a.RequestID, "choice": a.Choice, "by": a.By}, nil)
		cancel()
		var re *rpc.Error
		switch {
		case err == nil:
			res.Result = wire.DeliveredOK
		case errors.As(err, &re) && re.Code == rpc.CodeNotFound && time.Now().After(e.req.Deadline):
			res.Result, res.Message = wire.DeliveredLate, "the request took its default at its deadline"
		case errors.As(err, &re) && re.Code == rpc.CodeNotFound:
			res.Result, res.Message = wire.DeliveredEnded, "the request ended on the appliance"
		case errors.As(err, &re):
			// The appliance's message may quote the choice: only its code and field go on.
			res.Result, res.Message = wire.DeliveredWrong, fmt.Sprintf("the appliance refused it (%s %s)", re.Code, re.Field)
		default:
			res.Result, res.Message = wire.DeliveredError, "the appliance did not answer"
		}
	}
	f.mu.Lock()
	if len(f.delivered) > maxResults {
		f.delivered = map[string]wire.DialogResult{}
	}
	f.delivered[a.AnswerID] = res
	f.mu.Unlock()
	return res
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Open is how many questions of devbox's agent's session this Probe holds open: an agent
// adapter shows waiting_for_approval while its CLI's permission request waits here.
func (f *Forwarder) Open(devbox, agent, session string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.open {
		if e.req.DevBox == devbox && e.req.Agent == agent && e.req.Session == session {
			n++
		}
	}
	return n
}
