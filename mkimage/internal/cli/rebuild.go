package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/attestation"
	"github.com/allox-os/allox/mkimage/internal/rebuild"
)

// runRebuild rebuilds what a signed provenance describes, in a scratch directory, and compares
// every output with its subjects: "reproduced", or each difference and exit code 1.
func runRebuild(ctx context.Context, c Context, args []string) error {
	fs := flag.NewFlagSet("rebuild", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	keyRef := fs.String("key", "", "check first that this trusted public key signed the attestation (a PEM file, or env://VAR)")
	cache := fs.String("cache", artifact.CacheDir(), "the cache the kernel is taken from, by its build key ($ALLOX_CACHE)")
	keep := fs.Bool("keep", false, "keep the scratch directory (it is kept anyway when the rebuild differs or fails)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errUsage
	}
	o := rebuild.Options{Attestation: pos[0], CacheDir: *cache, Progress: c.Stdout}
	if *keyRef != "" {
		if o.Key, err = attestation.LoadKey(*keyRef, false); err != nil {
			return err
		}
	}
	if o.Repo, err = findModuleRoot("."); err != nil {
		return err
	}
	tmp := os.Getenv("TMPDIR")
	if tmp == "" {
		tmp = "/var/tmp"
	}
	if o.Scratch, err = os.MkdirTemp(tmp, "mkimage-rebuild-"); err != nil {
		return err
	}
	res, err := rebuild.Run(ctx, o)
	if err != nil {
		if os.Remove(o.Scratch) != nil { // not empty: keep what the rebuild got that far
			fmt.Fprintf(c.Stderr, "mkimage rebuild: kept %s\n", o.Scratch)
		}
		return err
	}
	if res.Reproduced() {
		fmt.Fprintf(c.Stdout, "reproduced: all %d outputs of %s rebuilt byte for byte from %s\n", res.Subjects, res.Image, pos[0])
		if *keep {
			fmt.Fprintf(c.Stdout, "kept %s\n", o.Scratch)
			return nil
		}
		return os.RemoveAll(o.Scratch)
	}
	for _, d := range res.Differences {
		fmt.Fprintln(c.Stdout, d)
	}
	fmt.Fprintf(c.Stderr, "mkimage rebuild: %d of %d outputs differ from %s; the first: %s (the rebuild is in %s)\n",
		len(res.Differences), res.Subjects, pos[0], res.Differences[0], filepath.Join(o.Scratch, "out"))
	return errReported
}
