package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Context{Args: args, Stdout: &out, Stderr: &errb}.Execute(context.Background())
	return code, out.String(), errb.String()
}

func defaultSpecText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../images/allox.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeSpec writes a spec into images/ of a copy-free layout: the spec's relative paths point at the
// real kernel/ directory of this checkout.
func writeSpec(t *testing.T, text string) string {
	t.Helper()
	dir, err := filepath.Abs("../../../images")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "test-*.hcl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name()
}

func TestValidateDefault(t *testing.T) {
	code, out, errs := run(t, "validate", "../../../images/allox.hcl")
	if code != 0 || !strings.Contains(out, "ok (allox") {
		t.Fatalf("validate default: code %d\nstdout %s\nstderr %s", code, out, errs)
	}
}

func TestValidateTypoSuggests(t *testing.T) {
	text := strings.Replace(defaultSpecText(t), "  fragments =", "  fragmnts =", 1)
	text = strings.Replace(text, `restart = "always"`, `restart = "alway"`, 1)
	path := writeSpec(t, text)
	code, _, errs := run(t, "validate", path)
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, errs)
	}
	line := 1 + strings.Count(text[:strings.Index(text, "fragmnts")], "\n")
	for _, want := range []string{
		filepath.Base(path) + ":" + itoa(line) + ":3: error: Unsupported argument", // file:line:col
		`Did you mean "fragments"?`,
		"fragmnts =", // the source snippet
		"alway",      // the second error, reported in the same run
		"2 error(s)",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPlanIsJSON(t *testing.T) {
	code, out, errs := run(t, "plan", "../../../images/allox.hcl")
	if code != 0 {
		t.Fatalf("plan: code %d: %s", code, errs)
	}
	var plan struct {
		Stages  []string          `json:"stages"`
		Outputs map[string]string `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan output is not JSON: %v\n%s", err, out)
	}
	if len(plan.Stages) == 0 || plan.Stages[0] != "kernel" || !strings.HasSuffix(plan.Outputs["rootfs"], "/out/rootfs.img") {
		t.Errorf("unexpected plan: %+v", plan)
	}
}

func TestUsageErrors(t *testing.T) {
	if code, _, errs := run(t, "frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: code %d, stderr %q", code, errs)
	}
	if code, _, errs := run(t, "validate"); code != 2 || !strings.Contains(errs, "usage: mkimage validate SPEC") {
		t.Errorf("validate without a spec: code %d, stderr %q", code, errs)
	}
	if code, _, errs := run(t, "validate", "/nonexistent.hcl"); code != 1 || !strings.Contains(errs, "no such file") {
		t.Errorf("missing spec: code %d, stderr %q", code, errs)
	}
}

func TestSourceDateEpoch(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := sourceDateEpoch(); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH must be") {
		t.Errorf("bad epoch accepted: %v", err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if n, err := sourceDateEpoch(); err != nil || n != 1700000000 {
		t.Errorf("epoch = %d, %v", n, err)
	}
}
