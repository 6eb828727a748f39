// Package katacheck verifies built artifacts offline against what the Kata Containers runtime and
// its guest expect: the image's partition layout and filesystem, the files the kernel and the agent
// need, the image size, the NVDIMM DAX header and the kernel configuration. Each rule is named and
// says how to fix what it finds. It reads the artifacts only (debugfs for ext4, the cpio reader for
// the initrd, go-diskfs for the MBR) and needs neither root nor a Kata installation.
package katacheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Rule is one named requirement.
type Rule struct {
	Name string
	Fix  string // how to fix a failure, for the report
	// applies says whether the rule concerns this target; check finds the problems.
	applies func(t *Target) bool
	check   func(ctx context.Context, t *Target) error
}

// warning is a check's problem that does not fail the rule.
type warning struct{ err error }

func (w *warning) Error() string { return w.err.Error() }
func (w *warning) Unwrap() error { return w.err }

// Result is one rule's outcome: Err is nil when the rule passed, Skipped says why a rule that does
// not concern the target was not run, Warning is a problem that does not fail the check.
type Result struct {
	Rule    string
	Err     error
	Fix     string
	Skipped string
	Warning error
}

// Warnings is the results with a warning.
func (r Report) Warnings() []Result {
	var out []Result
	for _, res := range r {
		if res.Warning != nil {
			out = append(out, res)
		}
	}
	return out
}

// Report is every rule's result, in rule order.
type Report []Result

// Failed is the failed results.
func (r Report) Failed() []Result {
	var out []Result
	for _, res := range r {
		if res.Err != nil {
			out = append(out, res)
		}
	}
	return out
}

// Err is nil when every rule passed, or one error naming each failed rule, its problem and its fix.
func (r Report) Err() error {
	var errs []error
	for _, res := range r.Failed() {
		errs = append(errs, &RuleError{Rule: res.Rule, Err: res.Err, Fix: res.Fix})
	}
	return errors.Join(errs...)
}

// RuleError is a failed rule.
type RuleError struct {
	Rule string
	Err  error
	Fix  string
}

func (e *RuleError) Error() string { return fmt.Sprintf("%s: %v; fix: %s", e.Rule, e.Err, e.Fix) }
func (e *RuleError) Unwrap() error { return e.Err }

// String renders the report one line per rule, as `mkimage kata-check` prints it.
func (r Report) String() string {
	var b strings.Builder
	for _, res := range r {
		switch {
		case res.Err != nil:
			fmt.Fprintf(&b, "FAIL %s: %v\n     fix: %s\n", res.Rule, indent(res.Err.Error()), res.Fix)
		case res.Warning != nil:
			fmt.Fprintf(&b, "warn %s: %v\n     fix: %s\n", res.Rule, indent(res.Warning.Error()), res.Fix)
		case res.Skipped != "":
			fmt.Fprintf(&b, "skip %s: %s\n", res.Rule, res.Skipped)
		default:
			fmt.Fprintf(&b, "ok   %s\n", res.Rule)
		}
	}
	return b.String()
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n     ") }

// Check loads the artifacts in dir and runs every rule over them.
func Check(ctx context.Context, dir string) (Report, error) {
	t, err := Load(dir)
	if err != nil {
		return nil, err
	}
	return t.Check(ctx), nil
}

// Check runs every rule over t.
func (t *Target) Check(ctx context.Context) Report {
	var r Report
	for _, rule := range Rules() {
		res := Result{Rule: rule.Name, Fix: rule.Fix}
		if !rule.applies(t) {
			res.Skipped = "does not apply to " + t.describe()
		} else {
			res.Err = rule.check(ctx, t)
			if w := (*warning)(nil); errors.As(res.Err, &w) {
				res.Warning, res.Err = w.err, nil
			}
		}
		r = append(r, res)
	}
	return r
}
