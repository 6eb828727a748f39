package proctree

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lineageScript exercises every way a process can leave its parent. Each
// process ends with its own exit code so the test can find it.
const lineageScript = `read _
sh -c 'sh -c "exit 31" & exit 30'                   # double fork: 30 exits, 31 is orphaned
setsid sh -c 'exit 32'                              # new session
sh -c 'sh -c "sleep 0.2; exit 34" & exit 33'        # daemonizing: the child outlives its parent
sh -c 'exec env true'                               # exec chain sh -> env -> true
exit 9`

func TestLineage(t *testing.T) {
	c := collector(t)
	run := newRun()
	cmd, release := startHeld(t, lineageScript)
	if err := c.Register(run, cmd.Process.Pid); err != nil {
		t.Fatalf("Register: %v", err)
	}
	outside := exec.Command("/bin/sh", "-c", "/bin/true; exit 42")
	release()
	if err := outside.Run(); outside.ProcessState == nil || outside.ProcessState.ExitCode() != 42 {
		t.Fatalf("outside process: %v", err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != 9 {
		t.Fatalf("root: %v", err)
	}

	want := []int{0, 0, 9, 30, 31, 32, 33, 34} // 0: the exec chain and sleep
	evs, ok := sink.waitFor(run, 10*time.Second, func(evs []Event) bool {
		return len(exitCodes(evs)) >= len(want)
	})
	if !ok {
		t.Fatalf("timed out; exit codes so far %v", exitCodes(evs))
	}
	if got := exitCodes(evs); !slices.Equal(got, want) {
		t.Errorf("exit codes of run = %v, want %v; processes: %s", got, want, describe(byProcess(evs)))
	}

	procs := byProcess(evs)
	var chain, root bool
	for _, p := range procs {
		if slices.Equal(p.execs, []string{"sh", "env", "true"}) && p.exited && p.status.ExitStatus() == 0 {
			chain = true
		}
		if p.exited && p.status.ExitStatus() == 32 && !slices.Equal(p.execs, []string{"setsid", "sh"}) {
			t.Errorf("setsid process exec'd %v, want [setsid sh]", p.execs)
		}
		if p.root {
			root = p.status.ExitStatus() == 9
		}
		if !p.exited {
			t.Errorf("process with execs %v never exited", p.execs)
		}
	}
	if !chain {
		t.Errorf("no process exec'd sh -> env -> true; processes: %s", describe(procs))
	}
	if !root {
		t.Error("root exit (code 9) not reported as Root")
	}

	if n := leaked(t, c, run); n != 0 {
		t.Errorf("%d attribution entries left after every process exited", n)
	}
	cg := cgroupID(t)
	for _, ev := range evs {
		if ev.CgroupID != cg {
			t.Errorf("%s of %d: cgroup id %d, want %d", ev.Kind, ev.TGID, ev.CgroupID, cg)
		}
		if ev.StartTime == 0 {
			t.Errorf("%s of %d: zero start time", ev.Kind, ev.TGID)
		}
	}
	for _, ev := range sink.all() {
		if ev.TGID == outside.Process.Pid || ev.RunID == 0 {
			t.Errorf("unregistered process reported: %+v", ev)
		}
	}
}

// TestRegisterExistingDescendants registers a run whose root already has a
// child: the child must be attributed too.
func TestRegisterExistingDescendants(t *testing.T) {
	c := collector(t)
	run := newRun()
	cmd := exec.Command("/bin/sh", "-c", `exec 3<&0; sh -c "read _ <&3; exit 6" & read _; wait $!; exit $?`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitChildren(t, cmd.Process.Pid)
	if err := c.Register(run, cmd.Process.Pid); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := c.Register(run+1, cmd.Process.Pid); err == nil {
		t.Error("second Register of the same process succeeded")
	}
	stdin.Write([]byte("a\nb\n"))
	stdin.Close()
	_ = cmd.Wait()
	want := []int{6, 6}
	evs, _ := sink.waitFor(run, 10*time.Second, func(evs []Event) bool {
		return len(exitCodes(evs)) >= 2
	})
	if got := exitCodes(evs); !slices.Equal(got, want) {
		t.Errorf("exit codes = %v, want %v (the pre-existing child and the root); events %+v", got, want, evs)
	}
}

func TestRegisterNoProcess(t *testing.T) {
	c := collector(t)
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := c.Register(newRun(), cmd.Process.Pid); err == nil {
		t.Error("Register of an exited pid succeeded")
	}
}

func waitChildren(t *testing.T, pid int) {
	t.Helper()
	path := "/proc/" + itoa(pid) + "/task/" + itoa(pid) + "/children"
	for range 500 {
		if data, err := readFile(path); err == nil && strings.TrimSpace(data) != "" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d never forked", pid)
}

func exitCodes(evs []Event) []int {
	var out []int
	for _, ev := range evs {
		if ev.Kind == Exit {
			out = append(out, ev.ExitCode())
		}
	}
	slices.Sort(out)
	return out
}

func describe(procs map[[2]uint64]*process) string {
	var b strings.Builder
	for k, p := range procs {
		b.WriteString(itoa(int(k[0])) + ":" + strings.Join(p.execs, ",") + ":" + itoa(p.status.ExitStatus()) + " ")
	}
	return b.String()
}

// TestRegisterZombie refuses a root that has exited but is not yet reaped:
// it would never exit again, so its entry would never be removed.
func TestRegisterZombie(t *testing.T) {
	c := collector(t)
	cmd := exec.Command("/bin/sh", "-c", `sh -c "exit 1" & read _`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	waitChildren(t, cmd.Process.Pid)
	child := firstChild(t, cmd.Process.Pid)
	for range 500 {
		if stat, _ := readFile("/proc/" + itoa(child) + "/stat"); strings.Contains(stat, ") Z ") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Register(newRun(), child); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Register(zombie) = %v, want ErrNoProcess", err)
	}
}

func TestClose(t *testing.T) {
	collector(t) // skips or fails like the others
	c, err := Open()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, ok := <-c.Events(); ok {
		t.Error("Events not closed by Close")
	}
	if err := c.Register(newRun(), os.Getpid()); !errors.Is(err, ErrClosed) {
		t.Errorf("Register after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func firstChild(t *testing.T, pid int) int {
	t.Helper()
	data, err := readFile("/proc/" + itoa(pid) + "/task/" + itoa(pid) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(data)
	if len(f) == 0 {
		t.Fatalf("pid %d has no children", pid)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
