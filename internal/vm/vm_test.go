package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func start(t *testing.T, tb testing.TB, ctx context.Context, opt Options) *VM {
	t.Helper()
	v, err := Start(ctx, tb, opt)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return v
}

func TestWaitForMarker(t *testing.T) {
	qemu := fakeQEMU(t, `printf '\033c\033[?7l\033[2J\033[0mSeaBIOS\n'; sleep 0.2; printf 'ALLOX-BOOT-DONE\r\n'; sleep 0.1; printf 'last words'`)
	v := start(t, t, t.Context(), fakeOptions(t, qemu))
	line, err := v.WaitFor(t.Context(), "BOOT-DONE")
	if err != nil || line != "ALLOX-BOOT-DONE" {
		t.Fatalf("WaitFor(BOOT-DONE) = %q, %v; want the line without \\r", line, err)
	}
	// The whole console is searched: an earlier line is still found, in any order.
	// Terminal escapes are dropped.
	if l, err := v.WaitForLine(t.Context(), "SeaBIOS"); err != nil || l.Text != "SeaBIOS" {
		t.Fatalf("WaitForLine(SeaBIOS) = %+v, %v", l, err)
	}
	// A last line without a newline is flushed when QEMU exits.
	if _, err := v.WaitFor(t.Context(), "last words"); err != nil {
		t.Fatal(err)
	}
	if err := v.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	got := v.Console()
	if len(got) != 3 || got[1].At < 200*time.Millisecond || got[1].At > got[2].At {
		t.Fatalf("Console() = %+v; want 3 lines, the marker after ≥200ms, times increasing", got)
	}
}

func TestWaitExitStatus(t *testing.T) {
	qemu := fakeQEMU(t, `echo 'qemu-system-x86_64: -drive file=x: Could not open' >&2; exit 3`)
	v := start(t, t, t.Context(), fakeOptions(t, qemu))
	err := v.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		// exitDescription flattens the error; check the words a person reads.
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("Wait() = %v; want exit status 3", err)
		}
	}
	if !strings.Contains(err.Error(), "Could not open") {
		t.Errorf("Wait() = %v; want it to quote QEMU's stderr", err)
	}
}

func TestWaitForQuotesTailWhenQEMUExits(t *testing.T) {
	qemu := fakeQEMU(t, `i=1; while [ $i -le 100 ]; do echo "line $i"; i=$((i+1)); done; exit 0`)
	v := start(t, t, t.Context(), fakeOptions(t, qemu))
	_, err := v.WaitFor(t.Context(), "ALLOX-BOOT-DONE")
	if !errors.Is(err, ErrExited) {
		t.Fatalf("WaitFor = %v; want ErrExited", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "| line 100") || !strings.Contains(msg, "| line 61\n") || strings.Contains(msg, "| line 60\n") {
		t.Errorf("WaitFor error must quote exactly the last %d lines (61..100):\n%s", TailLines, msg)
	}
	if err := v.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestWaitForTimeout(t *testing.T) {
	v := start(t, t, t.Context(), fakeOptions(t, fakeQEMU(t, `echo booting; exec sleep 30`)))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := v.WaitFor(ctx, "never")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "| booting") {
		t.Fatalf("WaitFor = %v; want a deadline error quoting the console", err)
	}
	begin := time.Now()
	v.Kill()
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Kill took %v", d)
	}
	if err := v.Wait(); err == nil {
		t.Error("Wait after Kill = nil; want the kill reported")
	}
}

func TestStartContextBoundsTheVM(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	v := start(t, t, ctx, fakeOptions(t, fakeQEMU(t, `exec sleep 30`)))
	err := v.Wait()
	if err == nil || !strings.Contains(err.Error(), "context ended") {
		t.Fatalf("Wait = %v; want QEMU killed as its context ended", err)
	}
}

func TestMissingWaitFailsTheTest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     func(*VM)
		wantErr bool
	}{
		{"neither", func(*VM) {}, true},
		{"killed", (*VM).Kill, false},
		{"waited", func(v *VM) { v.Kill(); _ = v.Wait() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &fakeTB{TB: t}
			v := start(t, tb, t.Context(), fakeOptions(t, fakeQEMU(t, `echo hello; exec sleep 30`)))
			if _, err := v.WaitFor(t.Context(), "hello"); err != nil {
				t.Fatal(err)
			}
			tc.end(v)
			tb.runCleanups()
			defer os.RemoveAll(v.out.dir) // kept, as the fake test failed on purpose
			if got := len(tb.errs) > 0; got != tc.wantErr {
				t.Fatalf("errors reported = %q; want some: %v", tb.errs, tc.wantErr)
			}
			if tc.wantErr && !strings.Contains(tb.errs[0], "neither waited for nor killed") {
				t.Errorf("error = %q", tb.errs[0])
			}
			if err := v.cmd.Process.Signal(syscall.Signal(0)); err == nil {
				t.Error("QEMU still runs after the cleanup")
			}
			if !tb.logged("vm") || !tb.logged("| hello") {
				t.Errorf("console not streamed to Logf: %q", tb.logs)
			}
		})
	}
}

func TestFailedTestKeepsConsoleAndPrintsReproducer(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprint("failed=", failed), func(t *testing.T) {
			tb := &fakeTB{TB: t}
			v := start(t, tb, t.Context(), fakeOptions(t, fakeQEMU(t, `echo ALLOX-POWEROFF`)))
			if err := v.Wait(); err != nil {
				t.Fatal(err)
			}
			tb.failed = failed
			tb.runCleanups()
			_, statErr := os.Stat(filepath.Join(v.out.dir, ConsoleLog))
			if kept := statErr == nil; kept != failed {
				t.Errorf("console log kept = %v (%v); want %v", kept, statErr, failed)
			}
			if got := tb.logged("reproduce this boot with:\n  " + v.CommandLine()); got != failed {
				t.Errorf("reproducer printed = %v; want %v; logs %q", got, failed, tb.logs)
			}
			os.RemoveAll(v.out.dir)
		})
	}
}

// TestCommandLineReproduces runs the kept reproducer with the real shell and checks that QEMU
// gets, byte for byte, the arguments the harness gave it.
func TestCommandLineReproduces(t *testing.T) {
	t.Setenv(ArtifactsEnv, t.TempDir())
	dir := t.TempDir()
	argsOut := filepath.Join(dir, "args")
	qemu := fakeQEMU(t, `for a in "$@"; do printf '%s\n' "$a"; done >> '`+argsOut+`'`)
	opt := fakeOptions(t, qemu)
	disk := filepath.Join(dir, "it's a disk, with comma.img")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	opt.Disks = []Disk{{Path: disk, Serial: "allox-store"}}
	opt.Cmdline = []string{"quiet", `allox.x="a b"`}
	opt.FwCfg = map[string]string{"opt/org.allox/token": "t,o$k'en"}
	opt.HostFwd = map[int]int{7000: 0}
	v := start(t, t, t.Context(), opt)
	if err := v.Wait(); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(argsOut)
	os.Remove(argsOut)
	if out, err := exec.Command("sh", filepath.Join(v.out.dir, Reproducer)).CombinedOutput(); err != nil {
		t.Fatalf("reproducer: %v\n%s", err, out)
	}
	second, _ := os.ReadFile(argsOut)
	want := strings.Join(v.argv[1:], "\n") + "\n"
	if diff := cmp.Diff(want, string(first)); diff != "" {
		t.Errorf("QEMU got other arguments than rendered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(string(first), string(second)); diff != "" {
		t.Errorf("reproducer %s gives other arguments (-harness +reproducer):\n%s", v.CommandLine(), diff)
	}
}

// Attack: another user of the host reads QEMU's command line (/proc/PID/cmdline is world-readable)
// for the appliance's bearer token. It is not there: fw_cfg values go through a file of the VM's
// own directory, mode 0600, which QEMU reads when it starts.
func TestFwCfgValueNotOnCommandLine(t *testing.T) {
	const token = "secret-token-5f1c9a"
	qemu := fakeQEMU(t, `for a in "$@"; do case "$a" in name=opt/org.allox/token,file=*) cat "${a#*,file=}";; esac; done; echo; cat /proc/$$/cmdline | tr '\0' ' '`)
	opt := fakeOptions(t, qemu)
	opt.FwCfg = map[string]string{"opt/org.allox/token": token}
	v := start(t, t, t.Context(), opt)
	if err := v.Wait(); err != nil {
		t.Fatal(err)
	}
	var out string
	for _, l := range v.Console() {
		out += l.Text + "\n"
	}
	lines := strings.SplitN(out, "\n", 2)
	if len(lines) < 2 || !strings.Contains(lines[0], token) {
		t.Fatalf("QEMU did not read the token from its fw_cfg file: %q", out)
	}
	if strings.Contains(lines[1], token) || strings.Contains(v.CommandLine(), token) {
		t.Fatalf("the token is on QEMU's command line: %q", lines[1])
	}
	entries, _ := os.ReadDir(v.out.dir)
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "fw_cfg-") {
			n++
			if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s is mode %s, want 0600", e.Name(), fi.Mode().Perm())
			}
		}
	}
	if n != 1 {
		t.Errorf("%d fw_cfg files in %s, want 1", n, v.out.dir)
	}
}

func TestHostPort(t *testing.T) {
	opt := fakeOptions(t, fakeQEMU(t, `exit 0`))
	opt.HostFwd = map[int]int{7000: 0, 80: 18080}
	v := start(t, t, t.Context(), opt)
	defer v.Kill()
	p := v.HostPort(7000)
	if p == 0 || p == 18080 || v.HostPort(80) != 18080 || v.HostPort(22) != 0 {
		t.Fatalf("HostPort(7000, 80, 22) = %d, %d, %d", p, v.HostPort(80), v.HostPort(22))
	}
	want := fmt.Sprintf("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:18080-:80,hostfwd=tcp:127.0.0.1:%d-:7000", p)
	if !strings.Contains(v.CommandLine(), " "+want+" ") {
		t.Errorf("command line lacks -netdev %s:\n%s", want, v.CommandLine())
	}
}

func TestStartErrors(t *testing.T) {
	opt := fakeOptions(t, filepath.Join(t.TempDir(), "no-such-qemu"))
	if _, err := Start(t.Context(), t, opt); err == nil || !strings.Contains(err.Error(), "apt-get install qemu-system-x86") {
		t.Errorf("Start with a missing QEMU = %v; want a hint to install it", err)
	}
	opt.Kernel = ""
	if _, err := Start(t.Context(), t, opt); !errors.Is(err, ErrOptions) {
		t.Errorf("Start without a kernel = %v; want ErrOptions", err)
	}
}

// A detached QEMU has its own process group and writes its console and stderr into files of
// DetachDir, which the harness tails: markers are found while it runs, stderr is quoted when it
// exits, and nothing of it goes through a pipe of this process.
func TestDetachedQEMU(t *testing.T) {
	qemu := fakeQEMU(t, `echo early; sleep 0.3; echo 'ALLOX-BOOT-DONE'; echo 'qemu: going down' >&2; sleep 0.3; exit 4`)
	opt := fakeOptions(t, qemu)
	opt.DetachDir = t.TempDir()
	v := start(t, t, t.Context(), opt)
	if pgid, err := syscall.Getpgid(v.Pid()); err != nil || pgid != v.Pid() || pgid == syscall.Getpgrp() {
		t.Errorf("detached QEMU's process group %d (%v), ours %d: want its own", pgid, err, syscall.Getpgrp())
	}
	if _, err := v.WaitFor(t.Context(), "BOOT-DONE"); err != nil {
		t.Fatalf("WaitFor on the tailed console: %v", err)
	}
	err := v.Wait()
	if err == nil || !strings.Contains(err.Error(), "exit status 4") || !strings.Contains(err.Error(), "going down") {
		t.Errorf("Wait() = %v; want exit status 4 and the stderr tail", err)
	}
	b, _ := os.ReadFile(filepath.Join(opt.DetachDir, DetachConsole))
	if string(b) != "early\nALLOX-BOOT-DONE\n" {
		t.Errorf("%s = %q", DetachConsole, b)
	}
	if got := v.Console(); len(got) != 2 {
		t.Errorf("Console() = %+v; want both lines", got)
	}
}
