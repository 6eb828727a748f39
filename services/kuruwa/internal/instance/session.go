package instance

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/term"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// SessionSpawner starts the terminals of an allox_session instance: each is a run of the session
// on a terminal of the workspace daemon's (process.exec), so it has the session's current/ as
// HOME and cwd, its cgroup, its limits and its network mode, is listed by process.list, and ends
// with the session's rollback with kill_processes. Nothing of this daemon's reaches the run: its
// environment, descriptors and sockets stay here.
type SessionSpawner struct {
	Client         *rpc.Client
	Agent, Session string
}

// Start runs spec as a run of the session and attaches the terminal to it.
func (s *SessionSpawner) Start(spec term.Spec, transcript *os.File) (*term.Terminal, error) {
	env := map[string]string{}
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, wire.Errorf(wire.CodeBadRequest, "env", "environment entry %q: write NAME=VALUE", kv)
		}
		env[k] = v
	}
	params := map[string]any{
		"agent_id": s.Agent, "session_id": s.Session, "argv": spec.Argv, "env": env,
		"terminal": rpc.ExecTerminal{Rows: uint16(spec.Rows), Cols: uint16(spec.Cols), Term: "xterm-256color"},
	}
	if spec.Dir != "" {
		params["cwd"] = spec.Dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x, err := s.Client.Exec(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("a run of session %s/%s: %w", s.Agent, s.Session, err)
	}
	go io.Copy(io.Discard, x.Stderr) // a terminal run has none; drained all the same
	return term.Attach(spec, sessionProcess{Process: term.RunProcess(x), c: s.Client, runID: x.Run.RunID}, transcript), nil
}

// sessionProcess is a run's terminal with the signals a terminal can carry: INT and QUIT are the
// terminal's ^C and ^\ (its line discipline signals the foreground group), and KILL, TERM and HUP
// end the run with process.kill, so that its final record (and exit status) still arrives on the
// stream; should that call fail, closing the stream makes the workspace daemon kill it.
type sessionProcess struct {
	term.Process
	c     *rpc.Client
	runID string
}

func (p sessionProcess) Signal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGINT:
		_, err := p.Write([]byte{0x03})
		return err
	case syscall.SIGQUIT:
		_, err := p.Write([]byte{0x1c})
		return err
	case syscall.SIGUSR1, syscall.SIGUSR2:
		return fmt.Errorf("a run of a session takes no %s through its terminal; KILL, TERM or HUP end it, INT and QUIT are its ^C and ^\\", sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.c.Call(ctx, rpc.ActionProcessKill, map[string]string{"run_id": p.runID}, nil); err != nil {
		return p.Process.Signal(syscall.SIGKILL)
	}
	return nil
}
