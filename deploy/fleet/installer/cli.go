package installer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// Usage is the command line of allox-deploy.
const Usage = `usage: allox-deploy install|cleanup|status [flags]
  install   verify the payload, install it on the host, wait until stopped, clean up (the DaemonSet pod)
  cleanup   remove what install installed (the pod's preStop hook)
  status    succeed once this payload is installed on the host (the pod's readiness probe)`

// ErrUsage is a command line allox-deploy does not understand.
var ErrUsage = errors.New(Usage)

// Run is allox-deploy: args without the program name.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return ErrUsage
	}
	fs := flag.NewFlagSet("allox-deploy "+args[0], flag.ContinueOnError)
	fs.SetOutput(stdout)
	o := Options{Log: stdout}
	fs.StringVar(&o.Root, "root", "/host", "the host's root directory as this pod sees it")
	fs.StringVar(&o.Payload, "payload", "/payload", "the build output to install")
	fs.StringVar(&o.ConfigDir, "config-dir", "", "the host's Kata configuration directory (default /etc/kata-containers/NAME)")
	fs.StringVar(&o.KataDefaults, "kata-defaults", "", "where the host has Kata's shipped configurations (install.sh's KATA_DEFAULTS)")
	fs.StringVar(&o.VerifyKey, "verify-key", "", "install: the PEM public key whose signed attestation the payload must carry, or none")
	fs.BoolVar(&o.RestartContainerd, "restart-containerd", true, "restart the host's containerd after changing its configuration")
	label := fs.Bool("label-node", true, "label this node (NODE_NAME) through the Kubernetes API when in a cluster")
	once := fs.Bool("once", false, "install: return once installed instead of waiting to be stopped")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%s: unexpected arguments %q\n%w", args[0], fs.Args(), ErrUsage)
	}
	if args[0] == "status" {
		return Status(o)
	}
	if *label {
		l, err := InClusterLabeler()
		if err != nil {
			return err
		}
		if l != nil {
			o.Label = l
		}
	}
	switch args[0] {
	case "install":
		if err := Install(ctx, o); err != nil {
			return err
		}
		if *once {
			return nil
		}
		// The pod stays up. When it is stopped (SIGTERM) it cleans up, as kata-deploy 4.1 does;
		// after the preStop hook's cleanup there is nothing left to do.
		<-ctx.Done()
		return Cleanup(context.WithoutCancel(ctx), o)
	case "cleanup":
		return Cleanup(ctx, o)
	}
	return ErrUsage
}
