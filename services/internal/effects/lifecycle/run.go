package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/services/internal/audit"
	"github.com/allox-os/allox/services/internal/effects/scrub"
	"github.com/allox-os/allox/services/internal/effects/verdict"
	"github.com/allox-os/allox/services/internal/tracked"
)

// runObserver is the plugin's tracked.Observer for one run.
type runObserver struct {
	p                 *Plugin
	agent, session    string
	protocol          int
	recovery          rpc.Recovery
	requireConsistent bool
	baseline          string

	runID, dir string
	cgroup     string // the run's cgroup, absolute
	obs        *observer
	steps      map[string]float64 // step → milliseconds
	faultOnce  sync.Once
	fault      error // the first fault; set once
	mu         sync.Mutex
}

// Begin starts the observer and captures A while the run's cgroup is frozen and bwrap waits.
func (ro *runObserver) Begin(st *tracked.Status) (json.RawMessage, error) {
	p := ro.p
	ro.runID, ro.dir, ro.cgroup = st.RunID, filepath.Join(p.cfg.Evidence, st.RunID), st.Cgroup
	if ro.protocol == 3 {
		p.mu.Lock()
		p.exclusive[sessionKey(ro.agent, ro.session)] = st.RunID
		p.mu.Unlock()
	}
	err := ro.begin(st)
	if err != nil {
		ro.setFault(err)
		ro.fence()
		if ro.obs != nil {
			ro.obs.abandon()
		}
		ro.done()
	}
	return nil, err
}

func (ro *runObserver) begin(st *tracked.Status) error {
	p := ro.p
	if err := os.MkdirAll(p.cfg.Evidence, 0o700); err != nil {
		return err
	}
	current, shared, _, err := p.ws.SessionPaths(ro.agent, ro.session)
	if err != nil {
		return err
	}
	args := []string{"--evidence", ro.dir, "--protocol", strconv.Itoa(ro.protocol), "--run-id", st.RunID,
		"--agent", ro.agent, "--session", ro.session, "--cgroup", st.Cgroup, "--workspace", current, "--shared", shared}
	if p.cfg.Scope != "" {
		args = append(args, "--scope", p.cfg.Scope)
	}
	args = append(args, "--hash-cache", filepath.Join(p.cfg.Evidence, "hash-cache", ro.agent, ro.session+".json"))
	if ro.protocol == 3 {
		args = append(args, "--baseline", ro.baseline, "--scrub-runtime="+strconv.FormatBool(ro.recovery.ScrubRuntime),
			"--require-consistent="+strconv.FormatBool(ro.requireConsistent))
	}
	err = ro.step("start", func() error {
		if ro.obs, err = p.takeObserver(); err != nil {
			return err
		}
		err := ro.obs.begin(args, ro.observerDied, p.cfg.StepTimeout)
		if err != nil && ro.obs.hasExited() {
			// The standby died before it became this run's observer (its exit reported nothing):
			// start one for the run instead.
			if ro.obs, err = p.startStandby(false); err != nil {
				return err
			}
			err = ro.obs.begin(args, ro.observerDied, p.cfg.StepTimeout)
		}
		return err
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.running[st.RunID] = ro
	p.mu.Unlock()
	if err := ro.step("capture_a", func() error { return ro.obs.call(request{Op: "capture", Point: "A"}, p.cfg.StepTimeout) }); err != nil {
		return err
	}
	// The next run's standby observer starts while this run's agent works.
	go p.refill()
	return nil
}

// observerDied handles the observer exiting while the run lives: fence the session and kill the
// run, so nothing keeps running unobserved.
func (ro *runObserver) observerDied(err error) {
	ro.setFault(fmt.Errorf("during the run: %w", err))
	ro.fence()
	_ = ro.p.ws.AbortRun(ro.agent, ro.session, ro.runID)
}

func (ro *runObserver) setFault(err error) {
	ro.faultOnce.Do(func() {
		ro.mu.Lock()
		ro.fault = err
		ro.mu.Unlock()
	})
}

func (ro *runObserver) currentFault() error {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	return ro.fault
}

// fence fences the session with the first fault and the evidence path.
func (ro *runObserver) fence() {
	reason := "system-effects observer fault"
	if err := ro.currentFault(); err != nil {
		reason += ": " + err.Error()
	}
	err := ro.p.ws.FenceFault(ro.agent, ro.session, reason, ro.dir)
	e := audit.Entry{Action: rpc.ActionSessionFence, AgentID: ro.agent, SessionID: ro.session, RunID: ro.runID,
		Outcome: audit.OK, Detail: reason + " (evidence: " + ro.dir + ")"}
	if err != nil {
		e.Outcome, e.Error = "internal", err.Error()
	}
	ro.p.ws.Record(e)
}

func (ro *runObserver) done() {
	p := ro.p
	go p.refill() // if the run failed before its release
	p.mu.Lock()
	delete(p.running, ro.runID)
	if p.exclusive[sessionKey(ro.agent, ro.session)] == ro.runID {
		delete(p.exclusive, sessionKey(ro.agent, ro.session))
	}
	p.mu.Unlock()
}

// End captures B (and for protocol 3 recovers and captures C), closes the evidence set, runs the
// verifier and turns its report into the run's effects, fencing the session when it must.
func (ro *runObserver) End(st *tracked.Status, quiesce error) (json.RawMessage, error) {
	defer ro.done()
	eff := rpc.Effects{Protocol: ro.protocol, EvidencePath: ro.dir, CheckpointID: ro.baseline,
		Verdict: rpc.VerdictInconclusive, Evidence: rpc.EvidenceIncomplete}
	err := ro.currentFault()
	if err == nil && quiesce != nil {
		err = fmt.Errorf("the run's cgroup could not be emptied and frozen: %w", quiesce)
	}
	if err == nil {
		err = ro.teardown()
	}
	if err == nil {
		err = ro.step("verify", func() error { return ro.verify(&eff) })
	}
	eff.StepsMs = ro.steps
	if err != nil {
		ro.setFault(err)
		if ro.obs != nil {
			ro.obs.abandon()
		}
		ro.fence()
		eff.Fenced, eff.Reason = true, "system-effects observer fault: "+ro.currentFault().Error()
	}
	b, mErr := json.Marshal(eff)
	if mErr != nil {
		return nil, mErr
	}
	if eff.Fenced {
		return b, errors.New(eff.Reason)
	}
	return b, nil
}

// teardown captures B, recovers and captures C (protocol 3), and closes the set.
func (ro *runObserver) teardown() error {
	p := ro.p
	if err := ro.step("capture_b", func() error { return ro.obs.call(request{Op: "capture", Point: "B"}, p.cfg.StepTimeout) }); err != nil {
		return err
	}
	if ro.protocol == 3 {
		if ro.recovery.ScrubRuntime {
			err := ro.step("scrub", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), p.cfg.StepTimeout)
				defer cancel()
				return scrub.Runtime(ctx, ro.cgroup, p.ws.RunTmpDir(ro.runID))
			})
			if err != nil {
				return err
			}
		}
		if err := ro.step("recover", ro.recover); err != nil {
			return err
		}
		if err := ro.step("capture_c", func() error { return ro.obs.call(request{Op: "capture", Point: "C"}, p.cfg.StepTimeout) }); err != nil {
			return err
		}
	}
	return ro.step("close", func() error { return ro.obs.close(p.cfg.StepTimeout) })
}

// recover runs the hash-pinned recover program with the store lent to it.
func (ro *runObserver) recover() error {
	p := ro.p
	prog, err := p.progs.get(filepath.Join(p.cfg.Libexec, RecoverProgram))
	if err != nil {
		return fmt.Errorf("recovery refused: %w", err)
	}
	return p.ws.HandoverSession(ro.agent, ro.session, func() error {
		cmd := exec.Command(prog.Path(), "--root", p.cfg.StoreRoot, "--state", p.cfg.StoreState,
			"--agent", ro.agent, "--session", ro.session, "--checkpoint", ro.baseline)
		cmd.Args[0] = RecoverProgram
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", RecoverProgram, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// verify runs the protocol's verifier over the closed set and fills eff from its report.
func (ro *runObserver) verify(eff *rpc.Effects) error {
	p := ro.p
	name, report := VerifyProgram, "report.json"
	if ro.protocol == 3 {
		name, report = RecoveryVerifyProgram, "recovery-report.json"
	}
	prog, err := p.progs.get(filepath.Join(p.cfg.Libexec, name))
	if err != nil {
		return fmt.Errorf("verifier refused: %w", err)
	}
	cmd := exec.Command(prog.Path(), ro.dir)
	cmd.Args[0] = name
	// Exit status 1 is a written report whose verdict is not CONSISTENT/COMPLETE; 2 (or a signal)
	// means the verifier itself failed.
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	data, err := os.ReadFile(filepath.Join(ro.dir, report))
	if err != nil {
		return fmt.Errorf("%s wrote no report: %w", name, err)
	}
	eff.Report = filepath.Join(ro.dir, report)
	if ro.protocol == 3 {
		var r verdict.RecoveryReport
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("%s: %w", report, err)
		}
		eff.Verdict, eff.Evidence, eff.Domains = r.Verdict, r.Evidence, domains(r.Restored)
		if r.Fence {
			ro.setFault(errors.New("recovery verifier: " + strings.Join(r.FenceReasons, "; ")))
			ro.fence()
			eff.Fenced, eff.Reason = true, ro.currentFault().Error()
		}
		return nil
	}
	var r verdict.Report
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", report, err)
	}
	eff.Verdict, eff.Evidence, eff.Domains = r.Verdict, r.Evidence, domains(r.Run)
	if r.Evidence != rpc.EvidenceComplete {
		ro.setFault(fmt.Errorf("verifier: evidence %s: %s", r.Evidence, strings.Join(r.Problems, "; ")))
		ro.fence()
		eff.Fenced, eff.Reason = true, ro.currentFault().Error()
	}
	return nil
}

func domains(t verdict.Transition) map[string]string {
	m := map[string]string{}
	for _, d := range t.Domains {
		m[d.Domain] = d.Verdict
	}
	return m
}

// Residue has the observer record the processes a managed run left behind (its group frozen),
// before they are killed: the processes domain then reports them.
func (ro *runObserver) Residue(st *tracked.Status) error {
	if err := ro.currentFault(); err != nil {
		return err
	}
	if err := ro.obs.call(request{Op: "residue"}, ro.p.cfg.StepTimeout); err != nil {
		ro.setFault(err)
		return err
	}
	return nil
}

// step runs fn and records how long it took.
func (ro *runObserver) step(name string, fn func() error) error {
	start := time.Now()
	err := fn()
	ro.mu.Lock()
	if ro.steps == nil {
		ro.steps = map[string]float64{}
	}
	ro.steps[name] = float64(time.Since(start).Microseconds()) / 1000
	ro.mu.Unlock()
	return err
}
