package qemutests

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/internal/vm"
)

// TestMain keeps make unit's promise (-short: no image, no QEMU): every test here boots the
// image, so none runs, whether the image is built or not.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("qemu-tests: -short (make unit) boots nothing; make test runs these")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// inCI is true when CI runs us: then nothing may skip.
var inCI = testenv.InCI()

// unavailable stops a test whose input is missing: a failure in CI, a skip that says what to run
// elsewhere (testenv decides).
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	testenv.Unavailable(tb, format, args...)
}

// needQEMU checks that the QEMU binary is installed.
func needQEMU(tb testing.TB) {
	tb.Helper()
	testenv.Tool(tb, "qemu-system-x86_64", "apt-get install qemu-system-x86")
}

// outDir is where mkimage wrote the artifacts: $ALLOX_OUT, default the repository's out/.
func outDir() string { return testenv.Out() }

// testContext bounds a test to base × vm.TimeoutScale(), ending early enough before the go test
// -timeout for the harness to report the console and a reproducer.
func testContext(tb testing.TB, base time.Duration) context.Context {
	tb.Helper()
	ctx := tb.Context()
	budget := vm.Scaled(base)
	if d, ok := deadline(tb); ok {
		if left := time.Until(d) - 30*time.Second; left < budget {
			tb.Logf("timeout: go test -timeout leaves %v of the %v this test may need under %s; pass -timeout 60m", left.Round(time.Second), budget, vm.Accel())
			budget = left
		}
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	tb.Cleanup(cancel)
	return ctx
}

func deadline(tb testing.TB) (time.Time, bool) {
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		return t.Deadline()
	}
	return time.Time{}, false
}
