package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/allox-os/allox/services/internal/effects/capture"
	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// request is one line on stdin.
type request struct {
	Op    string `json:"op"`
	Point string `json:"point,omitempty"`
}

// response is one line on stdout.
type response struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// errClosed ends the serve loop after a successful close.
var errClosed = errors.New("closed")

type observer struct {
	set     *evidence.Set
	cfg     capture.Config
	taken   []string // points captured so far, in order
	residue bool     // the residue was recorded
	rec     recorder
	histOut *os.File
	recBPF  map[string]bool // BPF objects the recorder loaded (BPF domain only)
	// hashCache is the session's file hash cache ("" = none); saved after a successful close.
	hashCache string
	// prewarmed is closed once a standby's preparation of the recorder is done (nil: none).
	prewarmed <-chan struct{}
}

// begin is the first request of an observer started with --standby: its command line.
type begin struct {
	Op   string   `json:"op"`
	Args []string `json:"args"`
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if slices.Equal(args, []string{"--standby"}) {
		return standby(ctx, stdin, stdout)
	}
	obs, err := newObserver(args)
	if err != nil {
		return err
	}
	return obs.serve(ctx, stdin, stdout)
}

// standby prepares what an observation's start needs and does not depend on the run (the
// history recorder's kernel types), then waits for the run's command line on stdin
// ({"op":"begin","args":[...]}), answers it and serves the run like an observer started with
// those arguments.
func standby(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	setNice(19)
	prewarmed := make(chan struct{})
	go func() {
		defer close(prewarmed)
		// A failure here recurs, and is reported, when the recorder starts after A.
		_ = prewarmHistory()
	}()
	in := bufio.NewReader(stdin)
	type result struct {
		line []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		l, err := in.ReadBytes('\n')
		setNice(0) // the run has begun: the rest of the preparation, if any, is on its path
		got <- result{l, err}
	}()
	var r result
	select {
	case <-ctx.Done():
		return fmt.Errorf("standby: terminated before begin: %w", ctx.Err())
	case r = <-got:
	}
	if r.err != nil {
		return fmt.Errorf("standby: stdin closed before begin: %w", r.err)
	}
	var b begin
	err := json.Unmarshal(r.line, &struct {
		Op *string `json:"op"`
	}{&b.Op})
	if err == nil && b.Op != "begin" {
		err = fmt.Errorf("op %q: a standby observer's first request is \"begin\"", b.Op)
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(r.line))
		dec.DisallowUnknownFields()
		err = dec.Decode(&b)
	}
	var obs *observer
	if err == nil {
		obs, err = newObserver(b.Args)
	}
	if err != nil {
		err = fmt.Errorf("begin: %w", err)
		_ = reply(stdout, response{Error: err.Error()})
		return err
	}
	obs.prewarmed = prewarmed
	if err := reply(stdout, response{OK: true}); err != nil {
		return obs.fault(stdout, fmt.Errorf("answer: %w", err))
	}
	return obs.serve(ctx, in, stdout)
}

// newObserver parses the command line and creates the evidence set.
func newObserver(args []string) (*observer, error) {
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		return nil, err
	}
	set, err := evidence.Create(o.dir, o.header)
	if err != nil {
		return nil, err
	}
	if o.hashCache != "" {
		capture.LoadHashCache(o.hashCache)
	}
	return &observer{set: set, cfg: o.cfg, hashCache: o.hashCache}, nil
}

// serve answers requests until close, a fault, EOF or ctx is done.
func (o *observer) serve(ctx context.Context, in io.Reader, out io.Writer) error {
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- bytes.Clone(sc.Bytes()):
			case <-done:
				return
			}
		}
		readErr <- sc.Err()
	}()
	for {
		var line []byte
		select {
		case <-ctx.Done():
			return o.fault(out, fmt.Errorf("terminated before close: %w", ctx.Err()))
		case err := <-readErr:
			return o.fault(out, fmt.Errorf("stdin closed before close: %v", err))
		case line = <-lines:
		}
		err := o.handle(line)
		if errors.Is(err, errClosed) {
			return reply(out, response{OK: true})
		}
		if err != nil {
			return o.fault(out, err)
		}
		if err := reply(out, response{OK: true}); err != nil {
			return o.fault(out, fmt.Errorf("answer: %w", err))
		}
	}
}

// fault logs err in the set's fault log, answers it, stops the recorder
// and returns it: the process exits non-zero and the set stays unclosed.
func (o *observer) fault(out io.Writer, err error) error {
	if o.rec != nil {
		_, serr := o.rec.Stop()
		o.rec = nil
		err = errors.Join(err, serr, o.histOut.Close())
	}
	_ = reply(out, response{Error: err.Error()})
	return errors.Join(err, o.set.Fault(err.Error()))
}

func reply(out io.Writer, r response) error {
	b, _ := json.Marshal(r)
	_, err := out.Write(append(b, '\n'))
	return err
}

func (o *observer) handle(line []byte) error {
	var req request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("request %q: %w", line, err)
	}
	h := o.set.Header()
	points := h.Points()
	switch req.Op {
	case "capture":
		if len(o.taken) == len(points) || req.Point != points[len(o.taken)] {
			return fmt.Errorf("capture %q out of order: captured %v of %v", req.Point, o.taken, points)
		}
		return o.capture(req.Point)
	case "residue":
		return o.recordResidue()
	case "close":
		if len(o.taken) != len(points) {
			return fmt.Errorf("close after %v: protocol %d needs %v", o.taken, h.Protocol, points)
		}
		if err := o.set.Close(); err != nil {
			return err
		}
		if o.hashCache != "" {
			roots := []string{o.cfg.Workspace, o.cfg.Shared}
			if o.cfg.Scope != nil {
				roots = append(roots, o.cfg.Scope.Paths...)
			}
			// The cache only saves work for the next run: failing to write it is not a fault.
			_ = capture.SaveHashCache(o.hashCache, roots...)
		}
		return errClosed
	}
	return fmt.Errorf("op %q: use \"capture\", \"residue\" or \"close\"", req.Op)
}

// capture takes one point. The recorder starts after A and stops before B.
func (o *observer) capture(point string) error {
	if point == evidence.PointB {
		if err := o.stopHistory(); err != nil {
			return err
		}
	}
	started := time.Now()
	for _, s := range capture.All(&o.cfg, point) {
		if err := o.set.WriteSnapshot(s); err != nil {
			return fmt.Errorf("capture %s: %w", point, err)
		}
	}
	if err := o.set.RecordCapture(point, started, time.Now()); err != nil {
		return fmt.Errorf("capture %s: %w", point, err)
	}
	o.taken = append(o.taken, point)
	if point == evidence.PointA {
		return o.startHistory()
	}
	return nil
}

// recordResidue captures the processes a managed run left in its frozen
// group, once, between A and B.
func (o *observer) recordResidue() error {
	if len(o.taken) != 1 || o.residue {
		return fmt.Errorf("residue after %v: allowed once, between A and B", o.taken)
	}
	o.residue = true
	started := time.Now()
	snap := capture.Domain(&o.cfg, scope.Processes, evidence.PointResidue)
	if err := o.set.WriteResidue(snap); err != nil {
		return fmt.Errorf("residue: %w", err)
	}
	return o.set.RecordCapture(evidence.PointResidue, started, time.Now())
}
