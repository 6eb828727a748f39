package qemutests

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/artifact"
)

// TestKataInstall runs the built kata/install.sh into a staging DESTDIR, as a platform team would
// on a Kata host, and checks that the installed Go drop-in names installed files byte-identical to
// the build output, that the drop-ins are 0640, and that --uninstall leaves DESTDIR as it was. A
// directory of placeholder files stands in for Kata's shipped configurations.
func TestKataInstall(t *testing.T) {
	a := needAppliance(t, imageMode)
	script := a.path(filepath.Join(artifact.KataDir, kata.InstallSh))
	if _, err := os.Stat(script); err != nil {
		unavailable(t, "%s is missing: rebuild the image (make image)", script)
	}
	defaults, dest, conf := t.TempDir(), t.TempDir(), "/etc/kata-containers/allox-test"
	for _, f := range []string{kata.GoConfigFile, kata.RuntimeRsConfig} {
		p := filepath.Join(defaults, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("# stands in for Kata's "+f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		cmd := exec.Command("sh", append([]string{script}, args...)...)
		// make image does not sign the build: its attestation checks are deploy/kata's tests.
		cmd.Env = append(os.Environ(), "DESTDIR="+dest, "KATA_DEFAULTS="+defaults, "ALLOX_VERIFY_KEY=none")
		out, err := cmd.CombinedOutput()
		t.Logf("install.sh %s:\n%s", args, out)
		if err != nil {
			t.Fatalf("install.sh %s: %v", args, err)
		}
	}
	run(conf)
	d := readDropInFile(t, filepath.Join(dest, conf, filepath.FromSlash(kata.GoRuntimeDropIn)))
	for _, p := range []string{d.Kernel, d.Image, d.Initrd} {
		if p == "" {
			continue
		}
		got, want := hashFile(t, filepath.Join(dest, p)), hashFile(t, a.path(filepath.Base(p)))
		if got != want {
			t.Errorf("installed %s has sha256 %s; the build output's is %s", p, got, want)
		}
	}
	for _, f := range []string{kata.GoRuntimeDropIn, kata.RuntimeRsDropIn} {
		if st, err := os.Stat(filepath.Join(dest, conf, filepath.FromSlash(f))); err != nil {
			t.Errorf("drop-in not installed: %v", err)
		} else if st.Mode() != 0o640 {
			t.Errorf("%s installed with mode %v; want 0640", f, st.Mode())
		}
	}
	run("--uninstall", conf)
	if entries, err := os.ReadDir(dest); err != nil || len(entries) > 0 {
		t.Errorf("uninstall left %v in DESTDIR (%v); want it as empty as before", entries, err)
	}
}

func hashFile(tb testing.TB, p string) string {
	tb.Helper()
	f, err := os.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
