package term

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
)

// The helper: run as a child of the test, it starts a terminal whose program ignores the
// hangup, prints the program's pid, and waits to be killed. Busy goroutines first, so that the
// fork could land on any of several threads.
func TestHelperParentOfATerminal(t *testing.T) {
	mode := os.Getenv("TERM_TEST_PARENT")
	if mode == "" {
		t.Skip("run by TestProgramDiesWithItsParent as its helper")
	}
	for range 4 {
		go func() {
			for {
				time.Sleep(time.Millisecond)
			}
		}()
	}
	tf, err := os.CreateTemp("", "transcript")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(tf.Name())
	term, err := Start(Spec{Argv: []string{"sh", "-c", "trap '' HUP; echo ready; exec sleep 60"}, Cols: 80, Rows: 24,
		RingBytes: 1 << 16, ScrollbackLines: 10, Env: []string{"PATH=" + os.Getenv("PATH")}, DieWithParent: mode == "die"}, tf)
	if err != nil {
		t.Fatal(err)
	}
	for s, _ := term.SnapshotAt(); !strings.Contains(strings.Join(s.Lines, "\n"), "ready"); s, _ = term.SnapshotAt() {
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("pid=%d\n", term.Status().PID)
	select {}
}

// A parent killed outright (SIGKILL: no chance to end its terminals) leaves a program that
// ignores the hangup running — unless the terminal was started to die with its parent.
func TestProgramDiesWithItsParent(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		outlive bool
	}{{"die", false}, {"keep", true}} {
		t.Run(tc.mode, func(t *testing.T) {
			helper := exec.Command(os.Args[0], "-test.run=^TestHelperParentOfATerminal$", "-test.v")
			helper.Env = append(os.Environ(), "TERM_TEST_PARENT="+tc.mode)
			out, err := helper.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			pid := 0
			for sc := bufio.NewScanner(out); pid == 0 && sc.Scan(); {
				if v, ok := strings.CutPrefix(sc.Text(), "pid="); ok {
					pid, _ = strconv.Atoi(v)
				}
			}
			if pid == 0 {
				_ = helper.Process.Kill()
				t.Fatalf("the helper printed no pid: %v", helper.Wait())
			}
			t.Cleanup(func() {
				if testenv.Running(pid) {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
				}
			})
			_ = helper.Process.Kill()
			_ = helper.Wait()
			wait := 5 * time.Second // for the program to die; it stays up at least 1 s if it outlives its parent
			if tc.outlive {
				wait = time.Second
			}
			deadline := time.Now().Add(wait)
			for testenv.Running(pid) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if alive := testenv.Running(pid); alive != tc.outlive {
				t.Errorf("program pid %d alive %v after its parent was killed: %v, want %v", pid, wait, alive, tc.outlive)
			}
		})
	}
}
