package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/allox-os/allox/init/internal/boot"
	"github.com/allox-os/allox/init/internal/console"
	"github.com/allox-os/allox/init/internal/shutdown"
	"github.com/allox-os/allox/init/internal/supervise"
	"github.com/allox-os/allox/internal/manifest"
	"github.com/allox-os/allox/internal/marker"
	"golang.org/x/sys/unix"
)

// app is init: its console, its kernel (through sys and the function fields) and its services.
type app struct {
	pid1    bool
	sys     *boot.Sys
	console *console.Console
	log     *slog.Logger
	level   *slog.LevelVar
	sigs    chan os.Signal
	reaper  *supervise.Reaper
	sup     *supervise.Supervisor // nil until the services start
	agent   bool                  // sup runs a kata-agent

	killAll func(unix.Signal) error // nil outside PID 1
	sync    func()
	unmount func(string, int) error // nil in a dry run
	reboot  func(cmd int) error     // nil in a dry run
	exit    func(code int)          // a dry run exits where PID 1 powers off
}

// request is a shutdown asked for by a signal; run returns it like an error.
type request struct {
	action shutdown.Action
	sig    os.Signal
}

func (r request) Error() string { return fmt.Sprintf("%v requested by %v", r.action, r.sig) }

var errCritical = errors.New("a critical service ended")

// consoleFlush bounds the wait for the last console lines before the power goes.
const consoleFlush = 5 * time.Second

// run boots and supervises until something takes the machine down; it always returns an error
// that says what (a *boot.StepError, a request, errCritical, ...).
func (a *app) run() error {
	ctx, cancel := context.WithCancelCause(context.Background())
	go a.watchSignals(cancel)
	if err := boot.Run(ctx, a.sys, boot.Early(), a.report); err != nil {
		return causeOf(ctx, err)
	}
	a.console.Reopen() // /dev is mounted now
	a.readCmdline()
	var m manifest.Manifest
	read := []boot.Step{boot.ReadManifest{Path: manifest.Path, Into: &m}}
	if err := boot.Run(ctx, a.sys, read, a.report); err != nil {
		return causeOf(ctx, err)
	}
	go a.reaper.Run(context.Background()) // from here on the reaper alone calls wait(2)
	// The store (on the first boot, mkfs.btrfs of the blank disk) needs only the devices and the
	// manifest: it runs beside the network, the fw_cfg blobs, the services' groups and the
	// kata-agent's start, and the services start once it is mounted.
	store := make(chan error, 1)
	go func() { store <- boot.Run(ctx, a.sys, boot.StoreSteps(&m), a.report) }()
	if err := a.beforeStore(ctx, &m); err != nil {
		<-store // never power off in the middle of formatting the store
		return err
	}
	if err := <-store; err != nil {
		return causeOf(ctx, err)
	}
	a.sup.Start()
	booted := a.sup.Booted()
	for {
		select {
		case <-booted:
			a.console.Line(marker.BootDone)
			a.log.Info("boot done")
			booted = nil
		case name := <-a.sup.Critical():
			return fmt.Errorf("%w: %s", errCritical, name)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// beforeStore runs what the boot does while the store is being mounted: the late steps, the
// services' supervisor and the kata-agent's start.
func (a *app) beforeStore(ctx context.Context, m *manifest.Manifest) error {
	if err := boot.Run(ctx, a.sys, boot.Late(m), a.report); err != nil {
		return causeOf(ctx, err)
	}
	if err := a.prepareServices(m); err != nil {
		a.log.Error("step failed", "step", "start services", "err", err)
		return &boot.StepError{Step: "start services", Err: err}
	}
	// The kata-agent first: Kata's runtime dials it on vsock as soon as the VM runs and gives up
	// after 45 s, while the first boot's mkfs.btrfs of the store can take seconds under TCG. The
	// agent needs nothing of the store or of the workspace services.
	if a.agent {
		a.sup.Start(supervise.AgentName)
	}
	return nil
}

func causeOf(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// prepareServices builds the supervisor over the manifest's services, with the kata-agent (when
// the image has one) first in start order, so that it is stopped last. Nothing starts yet.
func (a *app) prepareServices(m *manifest.Manifest) error {
	services, err := m.StartOrder()
	if err != nil {
		return err
	}
	agent, ok, err := supervise.Agent(a.sys.Root, m)
	if err != nil {
		return err
	}
	if ok {
		a.agent = true
		services = append([]manifest.Service{agent}, services...)
		a.log.Info("supervising the kata-agent", "path", agent.Command[0], "max_restarts", agent.MaxRestarts)
		_ = boot.Run(context.Background(), a.sys, boot.AgentSteps(agent.NoFile), a.report)
	}
	// Optional steps only warn: a service without its own group runs in init's.
	_ = boot.Run(context.Background(), a.sys, boot.ServiceGroups(services), a.report)
	a.sup, err = supervise.New(supervise.Config{
		Root:      a.sys.Root,
		LogDir:    a.sys.Path(boot.LogDir),
		Console:   a.console.Lossy(),
		Notify:    a.event,
		CgroupDir: a.sys.Path(boot.ServiceCgroupDir),
		// Init itself, started again: see supervise.Trampoline.
		Trampoline: "/proc/self/exe",
	}, a.reaper, services)
	return err
}

// handle takes the machine down: services, processes, sync, unmounts, then power off or reboot.
func (a *app) handle(err error) {
	action := shutdown.PowerOff
	var req request
	var step *boot.StepError
	switch {
	case errors.As(err, &req):
		action = req.action
		a.log.Info("shutdown requested", "action", action, "signal", req.sig)
	case errors.As(err, &step): // report has logged it
		a.console.Line(marker.StepFailed + " " + step.Error())
	default:
		a.log.Error("going down", "err", err)
	}
	seq := shutdown.Sequence{KillAll: a.killAll, Settled: a.reaper.Idle, Sync: a.sync, Unmount: a.unmount, Mounts: a.sys.Mounts()}
	if a.sup != nil {
		seq.StopServices = a.sup.Stop
	}
	if err := seq.Run(); err != nil {
		a.log.Warn("shutdown incomplete", "err", err)
	}
	a.log.Info("shutdown done", "action", action)
	a.console.Line(marker.PowerOff)
	a.console.Flush(consoleFlush)
	a.final(action, errors.As(err, &req))
}

// final never returns as PID 1: the process that ends is the kernel's panic.
func (a *app) final(action shutdown.Action, requested bool) {
	if a.reboot == nil {
		code := 1
		if requested {
			code = 0
		}
		a.exit(code)
		return
	}
	err := a.reboot(action.Cmd())
	a.log.Error("reboot(2) failed; halting here", "action", action, "err", err)
	for {
		time.Sleep(time.Hour)
	}
}
