// Command kuruwa is Kuruwa: multi-tenant terminals for agents, with grants, sandbox instances
// and a CLI. "kuruwa daemon" runs a project's main daemon; every other verb talks to one entry.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/allox-os/allox/services/kuruwa/internal/cli"
)

func main() {
	// A verb that streams gets signals as the end of its context and writes output as it comes;
	// every other verb makes one request, so it starts no signal thread and writes its output
	// with as few system calls as it can (a full scrollback is thousands of lines).
	ctx, stop := context.Background(), func() {}
	var stdout io.Writer = os.Stdout
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	if cli.NeedsSignals(os.Args[1:]) {
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	} else {
		stdout = out
	}
	err := (&cli.Context{Args: os.Args[1:], Stdin: os.Stdin, Stdout: stdout, Stderr: os.Stderr}).Execute(ctx)
	stop()
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = ferr
	}
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
