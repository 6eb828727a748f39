package build

import (
	"context"
	"fmt"

	"github.com/allox-os/allox/mkimage/internal/katacheck"
)

// checkKataContract runs `mkimage kata-check` over the finished output directory, so a build whose artifacts
// break the Kata contract fails, naming each broken rule and its fix; warnings (an image without a
// kata-agent, when the spec does not require one) are printed.
func checkKataContract(ctx context.Context, s *state) error {
	report, err := katacheck.Check(ctx, s.out)
	if err != nil {
		return err
	}
	if err := report.Err(); err != nil {
		return fmt.Errorf("the artifacts break the Kata contract:\n%w", err)
	}
	for _, w := range report.Warnings() {
		fmt.Fprintf(indent(s.opt.Progress), "warning: %s: %v\n  fix: %s\n", w.Rule, w.Warning, w.Fix)
	}
	return nil
}
