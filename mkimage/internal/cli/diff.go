package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/allox-os/allox/mkimage/internal/repro"
)

// runDiff compares two output directories (or two files) artifact by artifact; any difference is
// printed with where it first lies, and the exit code is 1.
func runDiff(ctx context.Context, c Context, args []string) error {
	if len(args) != 2 {
		return errUsage
	}
	st, err := os.Stat(args[0])
	if err != nil {
		return err
	}
	var diffs []repro.Difference
	if st.IsDir() {
		if diffs, err = repro.Dirs(args[0], args[1]); err != nil {
			return err
		}
	} else {
		detail, err := repro.Files(args[0], args[1])
		if err != nil {
			return err
		}
		if detail != "" {
			diffs = append(diffs, repro.Difference{Artifact: args[0], Detail: detail})
		}
	}
	for _, d := range diffs {
		fmt.Fprintln(c.Stdout, d)
	}
	if len(diffs) > 0 {
		fmt.Fprintf(c.Stderr, "mkimage diff: %d artifact(s) differ between %s and %s\n", len(diffs), args[0], args[1])
		return errReported
	}
	fmt.Fprintf(c.Stdout, "identical: %s and %s\n", args[0], args[1])
	return nil
}
