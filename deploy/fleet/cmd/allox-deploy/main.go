// Command allox-deploy is the node installer of an Allox OS fleet rollout: the entrypoint of the
// image mkimage push publishes, run by the allox-deploy DaemonSet with the host's root at /host.
// See deploy/fleet/installer.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/allox-os/allox/deploy/fleet/installer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := installer.Run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "allox-deploy:", err)
		if errors.Is(err, installer.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
