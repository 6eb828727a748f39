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
// the build output. A directory of placeholder files stands in for Kata's shipped configurations.
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
	cmd := exec.Command("sh", script, conf)
	cmd.Env = append(os.Environ(), "DESTDIR="+dest, "KATA_DEFAULTS="+defaults)
	out, err := cmd.CombinedOutput()
	t.Logf("install.sh:\n%s", out)
	if err != nil {
		t.Fatalf("install.sh: %v", err)
	}
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
	if _, err := os.Stat(filepath.Join(dest, conf, filepath.FromSlash(kata.RuntimeRsDropIn))); err != nil {
		t.Errorf("runtime-rs drop-in not installed: %v", err)
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
