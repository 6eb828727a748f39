package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/allox-os/allox/services/internal/effects/capture"
	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/history"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// recorder is what the observer needs of the history recorder.
type recorder interface {
	Stop() (evidence.History, error)
}

// startHistory starts the eBPF history recorder on the session cgroup's
// subtree, writing JSON lines to out. It is the observer's one seam to
// package history.
func startHistory(cgroup string, out io.Writer) (recorder, error) {
	r, err := history.Start(cgroup, out)
	if err != nil {
		return nil, err
	}
	return historyRecorder{r}, nil
}

// prewarmHistory prepares the recorder's start without loading anything into the kernel.
func prewarmHistory() error { return history.Prewarm() }

type historyRecorder struct{ r *history.Recorder }

func (h historyRecorder) Stop() (evidence.History, error) {
	s, err := h.r.Stop()
	return evidence.History{Events: s.Events, Dropped: s.Dropped, Incomplete: s.Incomplete}, err
}

// bpfFreeWait bounds the wait for the kernel to free the recorder's BPF
// objects after Stop before B is captured.
const bpfFreeWait = 10 * time.Second

// startHistory opens the history file and starts the recorder after A,
// noting which BPF objects it loaded.
func (o *observer) startHistory() error {
	f, err := os.OpenFile(o.set.Path(evidence.HistoryFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if o.prewarmed != nil {
		<-o.prewarmed
	}
	before, err := o.bpfObjects()
	if err != nil {
		f.Close()
		return err
	}
	rec, err := startHistory(o.cfg.SessionCgroup, f)
	if err != nil {
		f.Close()
		return fmt.Errorf("history recorder on %s: %w", o.cfg.SessionCgroup, err)
	}
	o.rec, o.histOut = rec, f
	after, err := o.bpfObjects()
	if err != nil {
		return err
	}
	for id := range after {
		if before[id] {
			delete(after, id)
		}
	}
	o.recBPF = after
	return nil
}

// bpfObjects lists the BPF object ids when the BPF domain is captured: the
// recorder's own objects must be gone from B like they were from A.
func (o *observer) bpfObjects() (map[string]bool, error) {
	if !slices.Contains(o.set.Header().Domains, scope.BPF) {
		return map[string]bool{}, nil
	}
	ids, err := capture.BPFObjects()
	if err != nil {
		return nil, fmt.Errorf("history recorder's BPF objects: %w", err)
	}
	return ids, nil
}

// awaitRecorderFreed waits until the kernel has freed every BPF object the
// recorder loaded: detached tracing programs go after an RCU grace period,
// and cilium/ebpf keeps the .bss and .rodata maps mapped into the process
// until the garbage collector releases their memory, hence the GC.
func (o *observer) awaitRecorderFreed() error {
	if len(o.recBPF) == 0 { // nothing to wait for, e.g. the BPF domain is out of scope
		return nil
	}
	deadline := time.Now().Add(bpfFreeWait)
	for {
		runtime.GC()
		now, err := o.bpfObjects()
		if err != nil {
			return err
		}
		var left []string
		for id := range o.recBPF {
			if now[id] {
				left = append(left, id)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			slices.Sort(left)
			return fmt.Errorf("history recorder's BPF objects %v still loaded %s after Stop", left, bpfFreeWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stopHistory stops the recorder before B, writes its summary and waits
// until its BPF objects are gone.
func (o *observer) stopHistory() error {
	if o.rec == nil {
		return errors.New("BUG: no history recorder running before B")
	}
	sum, err := o.rec.Stop()
	o.rec = nil
	err = errors.Join(err, o.histOut.Close()) // synced with the whole set at close
	if werr := o.set.WriteHistory(sum); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return fmt.Errorf("history recorder: %w", err)
	}
	return o.awaitRecorderFreed()
}
