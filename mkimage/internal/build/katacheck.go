package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/allox-os/allox/mkimage/internal/katacheck"
)

// checkKataContract runs `mkimage kata-check` over the finished output directory, so a build whose artifacts
// break the Kata contract fails, naming each broken rule and its fix; warnings (an image without a
// kata-agent, when the spec does not require one) are printed.
// The check is keyed by the outputs it reads and by mkimage itself: when neither changed since it
// last passed, it is not run again, and its warnings are printed as they were.
func checkKataContract(ctx context.Context, s *state) error {
	key, err := s.outputsKey()
	if err != nil {
		return err
	}
	if s.prev.Checked == key {
		s.next.Checked, s.next.CheckWarnings = key, s.prev.CheckWarnings
		fmt.Fprint(indent(s.opt.Progress), s.prev.CheckWarnings)
		s.reused("passed on the same outputs")
		return nil
	}
	s.ran("the outputs changed since it last passed")
	report, err := katacheck.Check(ctx, s.out)
	if err != nil {
		return err
	}
	if err := report.Err(); err != nil {
		return fmt.Errorf("the artifacts break the Kata contract:\n%w", err)
	}
	var warnings strings.Builder
	for _, w := range report.Warnings() {
		fmt.Fprintf(&warnings, "warning: %s: %v\n  fix: %s\n", w.Rule, w.Warning, w.Fix)
	}
	fmt.Fprint(indent(s.opt.Progress), warnings.String())
	s.next.Checked, s.next.CheckWarnings = key, warnings.String()
	return nil
}

// outputsKey digests the artifacts the check reads (names and sha256) and mkimage itself.
func (s *state) outputsKey() (string, error) {
	outs, err := hashOutputs(s.out, s.hash)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "mkimage %s\n", s.treeKey["mkimage"])
	for _, o := range outs {
		if o.Path == SBOMName { // written after the check, from the manifest
			continue
		}
		fmt.Fprintf(h, "%s %d %s\n", o.Path, o.Size, o.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
