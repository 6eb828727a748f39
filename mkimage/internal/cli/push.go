package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/deploy/fleet"
)

// runPush publishes a build output directory as a runnable OCI image (the payload and the node
// installer) and writes the DaemonSet that rolls it out, pinned to the pushed digest.
func runPush(ctx context.Context, c Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	out := fs.String("out", "out", "the build output directory (mkimage build -out DIR)")
	insecure := fs.Bool("insecure", false, "allow plain HTTP and unverified TLS (a local registry)")
	verifyKey := fs.String("verify-key", "", "the PEM public key every node requires the attestation to be signed with, or none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errUsage
	}
	p, err := fleet.SelectPayload(*out)
	if err != nil {
		return err
	}
	trusted, err := fleet.Trust(ctx, p, *verifyKey)
	if err != nil {
		return err
	}
	root, err := findModuleRoot(".")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "mkimage-push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "allox-deploy")
	if err := fleet.BuildInstaller(ctx, root, bin); err != nil {
		return err
	}
	img, err := fleet.Image(p, bin)
	if err != nil {
		return err
	}
	pinned, err := fleet.Registry{Insecure: *insecure}.Push(ctx, img, fs.Arg(0))
	if err != nil {
		return err
	}
	manifest, err := fleet.DaemonSet(*out, p.Name, pinned, trusted)
	if err != nil {
		return err
	}
	dsPath := filepath.Join(*out, fleet.DaemonSetFile)
	if err := os.WriteFile(dsPath, manifest, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(c.Stderr, "pushed %s %s (%d payload files); roll it out: kubectl apply -f %s\n", p.Name, p.Version, len(p.Files), dsPath)
	fmt.Fprintln(c.Stdout, pinned)
	return nil
}
