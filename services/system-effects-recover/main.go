// Command allox-system-effects-recover is the fixed recovery step of the system-effects observer's
// protocol v3: it restores one Session Workspace to a checkpoint through the workspace store's
// journaled rollback, and nothing else.
//
//	allox-system-effects-recover --root ROOT --state STATE --agent A --session S --checkpoint C
//
// The daemon runs it only after checking its sha256 against the image's pin, and only while it has
// lent the store out (store.Handover): this process takes the store's state lock itself, so a
// rollback interrupted by a crash here is finished by the next Open, like any other. It prints one
// JSON object describing the restored session on stdout. It never touches the agent's shared/,
// other sessions, or any system state; those stay in the verdict.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintf(os.Stderr, "allox-system-effects-recover: %v\n", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "allox-system-effects-recover: %v\n", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

type options struct {
	root, state, agent, session, checkpoint string
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("allox-system-effects-recover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.root, "root", "", "the workspace store root (the daemon's --root)")
	fs.StringVar(&o.state, "state", "", "the store's state directory (the daemon's --state)")
	fs.StringVar(&o.agent, "agent", "", "agent id")
	fs.StringVar(&o.session, "session", "", "session id")
	fs.StringVar(&o.checkpoint, "checkpoint", "", "the checkpoint to restore (the run's pinned baseline)")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	for _, f := range []struct{ name, v string }{{"root", o.root}, {"state", o.state}, {"agent", o.agent},
		{"session", o.session}, {"checkpoint", o.checkpoint}} {
		if f.v == "" {
			return o, fmt.Errorf("%w: --%s is required", errUsage, f.name)
		}
	}
	return o, nil
}
