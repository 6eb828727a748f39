package cli

import (
	"context"
	"fmt"

	"github.com/allox-os/allox/mkimage/internal/build"
)

// runVerify rechecks an output directory against its manifest; any finding is printed and the exit
// code is 1.
func runVerify(ctx context.Context, c Context, args []string) error {
	if len(args) != 1 {
		return errUsage
	}
	findings, err := build.Verify(args[0])
	if err != nil {
		return err
	}
	for _, f := range findings {
		fmt.Fprintln(c.Stdout, f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(c.Stderr, "mkimage verify: %d artifact(s) of %s disagree with its manifest\n", len(findings), args[0])
		return errReported
	}
	fmt.Fprintf(c.Stdout, "verified: every artifact of %s matches its manifest and SBOM\n", args[0])
	return nil
}
