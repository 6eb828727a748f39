package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/allox-os/allox/mkimage/internal/katacheck"
)

// runKataCheck checks built artifacts offline against the Kata contract: -out DIR, or the output
// directory of SPEC (the embedded default spec when omitted). Every rule's result is printed; a
// failed rule makes the exit code 1.
func runKataCheck(ctx context.Context, c Context, args []string) error {
	fs := flag.NewFlagSet("kata-check", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	out := fs.String("out", "", "the output directory to check (default: the spec's output.dir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path, err := oneOptionalArg(fs.Args())
	if err != nil {
		return err
	}
	dir := *out
	if dir == "" {
		l, err := load(c, path)
		if err != nil {
			return err
		}
		dir = l.img.Output.Dir
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	report, err := katacheck.Check(ctx, dir)
	if err != nil {
		return err
	}
	fmt.Fprint(c.Stdout, report)
	if failed := report.Failed(); len(failed) > 0 {
		fmt.Fprintf(c.Stderr, "mkimage kata-check: %d rule(s) of the Kata contract fail for %s\n", len(failed), dir)
		return errReported
	}
	if w := report.Warnings(); len(w) > 0 {
		fmt.Fprintf(c.Stdout, "kata-check: %s meets the Kata contract, with %d warning(s)\n", dir, len(w))
		return nil
	}
	fmt.Fprintf(c.Stdout, "kata-check: %s meets the Kata contract\n", dir)
	return nil
}
