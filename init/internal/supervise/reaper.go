// Package supervise runs the services of the image manifest under the Go PID 1: dependency
// order, readiness checks, restart with backoff, output to the console and to log files, reverse
// order stop, and the reaping of every child of PID 1.
package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Reaper is the one caller of wait(2) while it runs: it reaps every exited child (services and
// the orphans the kernel re-parents to PID 1) and hands the statuses of the processes started
// through it to their waiters. Nothing may use exec.Cmd.Wait or os.Process.Wait meanwhile: the
// reaper would take the status first.
type Reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	orphans int
	idle    bool
	sig     chan os.Signal
}

// NewReaper subscribes to SIGCHLD at once, so no exit between now and Run is missed.
func NewReaper() *Reaper {
	r := &Reaper{waiting: map[int]chan unix.WaitStatus{}, sig: make(chan os.Signal, 1)}
	signal.Notify(r.sig, unix.SIGCHLD)
	return r
}

// Run reaps on every SIGCHLD (and once a second, should a wake-up be lost) until ctx is done.
func (r *Reaper) Run(ctx context.Context) {
	defer signal.Stop(r.sig)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.Reap()
		select {
		case <-ctx.Done():
			return
		case <-r.sig:
		case <-tick.C:
		}
	}
}

// Reap collects every child that has exited so far.
func (r *Reaper) Reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			r.idle = true
			return
		case err != nil || pid <= 0: // pid 0: children remain, none has exited
			r.idle = false
			return
		}
		if ch, ok := r.waiting[pid]; ok {
			ch <- ws
			delete(r.waiting, pid)
		} else {
			r.orphans++
		}
	}
}

// Start runs start (which forks a process and returns its pid) with reaping held off, so the
// child cannot be reaped before its waiter is registered. The channel receives its wait status.
func (r *Reaper) Start(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = ch
	return pid, ch, nil
}

// Idle reaps and reports whether no child process is left at all.
func (r *Reaper) Idle() bool {
	r.Reap()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idle
}

// Orphans counts the children reaped that nobody was waiting for.
func (r *Reaper) Orphans() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}

// ExitStatus is the status a shell would show: the exit code, or 128 + the killing signal.
func ExitStatus(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return -1
}

// CombinedOutput runs cmd and returns its stdout and stderr together, as exec.Cmd.CombinedOutput
// does, but takes the exit status from the reaper: while Run reaps, exec.Cmd.Wait would race it
// for the child and fail with ECHILD ("waitid: no child processes"). Boot steps that run a tool
// after the reaper has started (the store's mkfs.btrfs, while the kata-agent already runs) must
// use this. ctx kills the command. cmd must not have Stdout, Stderr or a context of its own.
func (r *Reaper) CombinedOutput(ctx context.Context, cmd *exec.Cmd) ([]byte, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, errors.New("CombinedOutput: Stdout or Stderr already set")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	// Files, not writers: exec then copies nothing itself, and nothing waits for the command
	// but the reaper.
	cmd.Stdout, cmd.Stderr = pw, pw
	pid, status, err := r.Start(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	pw.Close()
	if err != nil {
		return nil, err
	}
	defer cmd.Process.Release()
	var out bytes.Buffer
	copied := make(chan error, 1)
	go func() { _, err := io.Copy(&out, pr); copied <- err }()
	var ws unix.WaitStatus
	select {
	case ws = <-status:
	case <-ctx.Done():
		_ = unix.Kill(pid, unix.SIGKILL)
		ws = <-status
	}
	<-copied // the command has exited: its end of the pipe is closed (unless a child keeps it)
	switch st := ExitStatus(ws); {
	case ctx.Err() != nil:
		return out.Bytes(), fmt.Errorf("%s: %w", cmd.Path, context.Cause(ctx))
	case st != 0:
		return out.Bytes(), fmt.Errorf("%s: exit status %d", cmd.Path, st)
	}
	return out.Bytes(), nil
}
