package daemon_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// "kuruwa daemon" hands over to kuruwad beside it, which serves until SIGTERM and then removes
// its sockets.
func TestDaemonVerbRunsKuruwad(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "kwp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var out bytes.Buffer
	cmd := exec.Command(kuruwaBin, "daemon", "--dir", filepath.Join(dir, "d"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(dir, "d", "manage", "sock")
	for deadline := time.Now().Add(10 * time.Second); exec.Command(kuruwaBin, "--entry", entry, "ls").Run() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("daemon never answered:\n%s", out.String())
		}
	}
	if err := exec.Command(kuruwaBin, "--entry", entry, "start", "x", "--instance", "host", "--", "sleep", "30").Run(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exited with %v:\n%s", err, out.String())
	}
	if _, err := os.Lstat(entry); err == nil {
		t.Fatal("management socket left after shutdown")
	}
}

func TestKuruwadReportsConfigErrorsWithPositions(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kuruwa.hcl")
	os.WriteFile(cfg, []byte("definition \"box\" {\n  init = [\"bwrap\"]\n}\ntenant \"a\" {\n  definitions = [\"bxo\"]\n}\n"), 0o644)
	out, err := exec.Command(kuruwadBin, "daemon", "--dir", filepath.Join(dir, "d"), "--config", cfg).CombinedOutput()
	if err == nil {
		t.Fatal("daemon started with a bad configuration")
	}
	for _, want := range []string{"kuruwa.hcl:5:17: error: Unknown definition", `Did you mean "box"?`, "^"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
