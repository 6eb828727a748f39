// Command kuruwa is Kuruwa: multi-tenant terminals for agents, with grants, sandbox instances
// and a CLI. "kuruwa daemon" runs a project's main daemon; every other verb talks to one entry.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/allox-os/allox/services/kuruwa/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := (&cli.Context{Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}).Execute(ctx)
	stop()
	var exit *cli.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		os.Exit(exit.Code)
	default:
		fmt.Fprintln(os.Stderr, "kuruwa:", err)
		os.Exit(1)
	}
}
