// Command probe is the host-side data plane of the Gateway: it holds the host's lease, pulls
// intents over mutual TLS, runs the host's Worker Sandboxes (the Allox appliance), supervises
// their sessions and heals a bounded set of local faults; it serves the ssh_remote and dialog
// channels and starts the agents' adapters on the Gateway's task intents (API keys by reference
// from --agent-keys DIR).
//
//	probe serve --gateway URLS --host NAME --pki DIR --state DIR [--slots N] [runtime flags]
//	probe status --state DIR
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError()
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "probe")
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], log)
	case "status":
		return status(args[1:], stdout)
	}
	return usageError()
}

func usageError() error {
	return fmt.Errorf("usage: probe serve|status (see `go doc ./deploy/probe/cmd/probe`)")
}
