package term

import (
	"context"
	"fmt"
	"syscall"

	"github.com/allox-os/allox/internal/rpc"
)

// RunProcess is a run of the workspace daemon on a terminal of its own (rpc.Client.Exec with a
// terminal) as a Process: a terminal whose program lives in a session's sandbox, tracked,
// limited and ended like every run of the session.
func RunProcess(x *rpc.Exec) Process { return runProcess{x} }

type runProcess struct{ x *rpc.Exec }

func (p runProcess) Read(b []byte) (int, error)  { return p.x.Stdout.Read(b) }
func (p runProcess) Write(b []byte) (int, error) { return p.x.Write(b) }
func (p runProcess) Pid() int                    { return p.x.Run.Pid }

// Close closes the run's stream: a run still going is killed by the daemon.
func (p runProcess) Close() error { return p.x.Close() }

func (p runProcess) Resize(cols, rows int) error { return p.x.Resize(uint16(rows), uint16(cols)) }

// Signal can only kill: the stream carries no signals, and closing it kills the run.
func (p runProcess) Signal(sig syscall.Signal) error {
	if sig != syscall.SIGKILL {
		return fmt.Errorf("a run's terminal takes no %s over its stream, only a kill", sig)
	}
	return p.x.Close()
}

// Wait is the run's exit code from its final record (128+n when a signal ended it).
func (p runProcess) Wait() (int, string) {
	r, err := p.x.Wait(context.Background())
	if err != nil {
		return -1, ""
	}
	if n := rpc.SignalNumber(r.Signal); n != 0 {
		return 128 + int(n), r.Signal
	}
	if r.ExitCode != nil {
		return *r.ExitCode, ""
	}
	return -1, ""
}
