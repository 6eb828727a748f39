package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/allox-os/allox/init/internal/boot"
	"github.com/allox-os/allox/init/internal/cmdline"
	"github.com/allox-os/allox/init/internal/shutdown"
	"github.com/allox-os/allox/init/internal/supervise"
	"github.com/allox-os/allox/internal/marker"
)

// report logs a boot step: its String is the "step" attribute.
func (a *app) report(r boot.Result) {
	step := r.Step.String()
	switch {
	case !r.Done:
		a.log.Debug("step starting", "step", step)
	case r.Err == nil:
		a.log.Info("step done", "step", step, "took", r.Took.Round(time.Millisecond))
	case errors.Is(r.Err, boot.ErrSkipped):
		a.log.Info("step skipped", "step", step, "reason", r.Err)
	case r.Required:
		a.log.Error("step failed", "step", step, "err", r.Err)
	default:
		a.log.Warn("optional step failed", "step", step, "err", r.Err)
	}
}

func (a *app) notice(n boot.Notice) {
	if n.Marker != "" {
		a.console.Line(n.Marker)
	}
	a.log.Warn(n.Message, n.Attrs...)
}

// event logs what the supervisor reports and prints the service markers.
func (a *app) event(e supervise.Event) {
	l := a.log.With("service", e.Service)
	switch e.Kind {
	case supervise.Started:
		l.Info("service started", "pid", e.PID)
	case supervise.StartFailed:
		l.Error("service did not start", "err", e.Err)
	case supervise.Ready:
		a.console.Line(marker.Ready(e.Service))
		l.Info("service ready")
	case supervise.NotReady:
		l.Warn("service not ready", "err", e.Err)
	case supervise.Exited:
		a.console.Line(marker.Exited(e.Service, e.Status))
		l.Info("service exited", "status", e.Status)
	case supervise.Restarting:
		l.Info("service restarting", "delay", e.Delay)
	case supervise.Done:
		level := slog.LevelInfo
		if e.Critical {
			level = slog.LevelError
		}
		l.Log(context.Background(), level, "service ended for good", "status", e.Status, "critical", e.Critical)
	case supervise.Warning:
		l.Warn("service warning", "err", e.Err)
	}
}

// readCmdline applies the allox.* kernel parameters; a missing /proc/cmdline (dry run) is fine.
func (a *app) readCmdline() {
	f, err := os.Open(a.sys.Path("/proc/cmdline"))
	if err != nil {
		a.log.Debug("no kernel command line", "err", err)
		return
	}
	defer f.Close()
	p, err := cmdline.Parse(f)
	if err != nil {
		a.log.Warn("kernel command line unreadable", "err", err)
		return
	}
	if p.Debug {
		a.level.Set(slog.LevelDebug)
	}
	for _, u := range p.Unknown {
		a.log.Warn("unknown kernel parameter ignored", "param", u, "known", "allox.debug")
	}
	for _, bad := range p.Invalid {
		a.log.Warn("invalid kernel parameter ignored", "param", bad)
	}
}

// watchSignals turns shutdown signals into a cancel of run; the others are logged and dropped.
func (a *app) watchSignals(cancel context.CancelCauseFunc) {
	for sig := range a.sigs {
		if action, ok := shutdown.ForSignal(sig); ok {
			a.log.Info("signal received", "signal", sig, "action", action)
			cancel(request{action, sig})
			continue
		}
		a.log.Warn("signal ignored", "signal", sig)
	}
}
