package probe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/spec"
)

func writeRecord(t *testing.T, dir, name string, rec qemuRecord) string {
	t.Helper()
	rec.Runtime = spec.RuntimeQEMU
	b, _ := json.Marshal(rec)
	path := filepath.Join(dir, "sandbox-"+name+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "300")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	// Start returns once the exec succeeded, but the kernel sets the new command line a moment
	// later: until then processIdentity refuses it, and the identity the tests record would not
	// be the process's.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		_, _, err := processIdentity(c.Process.Pid)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep %d: no identity after 10 s: %v", c.Process.Pid, err)
		}
	}
}

// A process caught between its parent's Start and the end of its execve has an empty command
// line; processIdentity refuses it rather than record an identity it will never have again.
func TestProcessIdentityRefusesAnEmptyCommandLine(t *testing.T) {
	want := sha256.Sum256([]byte("sleep\x00300\x00"))
	for range 2000 {
		c := exec.Command("sleep", "300")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		start, sum, err := processIdentity(c.Process.Pid)
		c.Process.Kill()
		c.Wait()
		if err != nil {
			continue // caught mid-execve, and refused
		}
		if start == 0 || sum != hex.EncodeToString(want[:]) {
			t.Fatalf("identity start %d cmdline sha256 %s; want the full command line's %x", start, sum, want)
		}
	}
}

// A record whose process is gone, or whose pid is another process now (its start time or command
// line differ), is stale: removed at the Probe's start, and that process is left alone. A record
// of the very process recorded stays for its DevBox's boot intent to adopt.
func TestQEMURecordsStaleAreCleaned(t *testing.T) {
	dir := t.TempDir()
	gone := startSleep(t)
	gonePid := gone.Process.Pid
	gone.Process.Kill()
	gone.Wait()
	deadPath := writeRecord(t, dir, "dead", qemuRecord{Pid: gonePid})

	other := startSleep(t)
	start, sum, err := processIdentity(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	reusedPath := writeRecord(t, dir, "reused", qemuRecord{Pid: other.Process.Pid, StartTime: start - 1, CmdlineSHA256: sum})
	otherCmd := writeRecord(t, dir, "othercmd", qemuRecord{Pid: other.Process.Pid, StartTime: start, CmdlineSHA256: "00"})
	livePath := writeRecord(t, dir, "live", qemuRecord{Pid: other.Process.Pid, StartTime: start, CmdlineSHA256: sum})
	processPath := filepath.Join(dir, "sandbox-proc.json") // the process runtime's: not the qemu runtime's to clean
	os.WriteFile(processPath, []byte(`{"pid":1,"endpoint":"http://127.0.0.1:1","token":"x"}`), 0o600)

	r := &QEMURuntime{State: dir}
	cleaned := r.CleanStale()
	for _, p := range []string{deadPath, reusedPath, otherCmd} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want the stale record removed", filepath.Base(p), err)
		}
	}
	if len(cleaned) != 3 {
		t.Errorf("cleaned %v, want the three stale records", cleaned)
	}
	for _, p := range []string{livePath, processPath} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it kept", filepath.Base(p), err)
		}
	}
	if err := syscall.Kill(other.Process.Pid, 0); err != nil {
		t.Errorf("the process whose pid a stale record named was touched: %v", err)
	}
}

// A recorded process that is the one recorded but answers neither QMP nor system.info is not
// adopted: it is killed (it is ours and broken), its record removed, and a new boot follows.
func TestQEMUAdoptRefusesAnUnansweringVM(t *testing.T) {
	dir := t.TempDir()
	c := startSleep(t)
	start, sum, err := processIdentity(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token-box")
	os.WriteFile(tokenFile, []byte("t\n"), 0o600)
	path := writeRecord(t, dir, "box", qemuRecord{Pid: c.Process.Pid, StartTime: start, CmdlineSHA256: sum,
		QMP: filepath.Join(dir, "no-qmp.sock"), TokenFile: tokenFile, HostPort: 1, GuestPort: 8093})
	r := &QEMURuntime{State: dir}
	ctx, cancel := context.WithTimeout(t.Context(), 30e9)
	defer cancel()
	sb, err := r.adopt(ctx, "box")
	if err == nil || errors.Is(err, os.ErrNotExist) {
		t.Fatalf("adopt: %v, %v; want a stale record error", sb, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record: %v; want it removed", err)
	}
	if err := c.Wait(); err == nil {
		t.Errorf("the unanswering recorded process exited cleanly; want it killed")
	}
}
