// Command allox is the client of a session's own socket, bound read-only at /run/allox/bin/allox
// in every sandboxed run: it speaks the daemon's /v1/rpc envelope over /run/allox/session.sock
// (or $ALLOX_SESSION_SOCKET), where the caller is always the run's own session.
//
//	allox session info
//	allox turn begin ID
//	allox turn end ID [--failed]
//	allox call ACTION [JSON]
//	allox relay tcp HOST PORT | relay unix PATH   (stdin and stdout to a connection the run makes)
//	allox sftp-server                             (SFTP on stdin and stdout)
//	allox share|network|monitor ...   (the plugins' subcommands)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "allox: %v\n", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
