package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/testenv"
	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

// deafTerminals starts, in the host instance, terminals whose programs ignore SIGHUP (as
// everything under nohup does) and start a child in their own process group before running
// script, and returns the pids of both. The test kills any left at its end.
func deafTerminals(t *testing.T, f *fixture, script string, names ...string) []int {
	t.Helper()
	var pids []int
	for _, name := range names {
		f.must(f.mgmt(), "start", name, "--instance", "host", "--", "sh", "-c", "trap '' HUP; sleep 60 & echo child=$! pid=$$; "+script)
		child := childOnScreen(t, f.waitScreen(f.mgmt(), name, "pid="))
		for _, pid := range []int{f.status(name).PID, child} {
			pids = append(pids, pid)
			t.Cleanup(func() {
				if testenv.Running(pid) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
		}
	}
	return pids
}

// childOnScreen is the pid a terminal's script printed as child=PID.
func childOnScreen(t *testing.T, screen string) int {
	t.Helper()
	_, after, _ := strings.Cut(screen, "child=")
	if fs := strings.Fields(after); len(fs) > 0 && atoi(fs[0]) > 0 {
		return atoi(fs[0])
	}
	t.Fatalf("no child pid on the screen:\n%s", screen)
	return 0
}

func hostInstance(t *testing.T, f *fixture) wire.InstanceInfo {
	t.Helper()
	var res wire.LsResult
	if err := json.Unmarshal([]byte(f.must(f.mgmt(), "ls", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	for _, in := range res.Instances {
		if in.Name == "host" {
			return in
		}
	}
	t.Fatalf("no host instance in %+v", res.Instances)
	return wire.InstanceInfo{}
}

// outsider is a process the daemon did not start, leading a session of its own as a terminal's
// program does: killing orphans must never reach it.
func outsider(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("sleep", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c
}

// The attack: a terminal's program ignores SIGHUP and kills its instance daemon, its parent, to
// run on unsupervised — ended neither by clean, nor by a shutdown, behind an instance reported
// gone. Its own process group and a bystander terminal's must end with the instance daemon; a
// process the daemon did not start must not.
func TestTerminalThatKillsItsInstanceDaemonDoesNotOutliveIt(t *testing.T) {
	f := newDaemon(t, "")
	other := outsider(t)
	pids := deafTerminals(t, f, "exec sleep 60", "bystander")
	// The killer waits for a line, so that it kills once the daemon knows it.
	pids = append(pids, deafTerminals(t, f, "read x; kill -9 $PPID; exec sleep 60", "killer")...)
	host := hostInstance(t, f)
	// The send itself may see the instance daemon die before it replies.
	_, _ = f.kw(f.mgmt(), "send", "killer", "go\n")
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(host.PID, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the killer did not kill its instance daemon (pid %d)", host.PID)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for testenv.Running(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if testenv.Running(pid) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("pid %d outlived its instance daemon by 10 s: %s", pid, b)
		}
	}
	if !testenv.Running(other.Process.Pid) {
		t.Error("killing the orphans killed a process the daemon did not start")
	}
	for deadline := time.Now().Add(5 * time.Second); hostInstance(t, f).Valid; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the host instance is still valid after its daemon died")
		}
	}
}

// An instance daemon that hangs is killed at shutdown after a grace; its terminals' process
// groups, each in a session of its own outside the daemon's, must end with it, and the shutdown
// returns only once they are gone.
func TestShutdownEndsTheTerminalsOfAHungInstanceDaemon(t *testing.T) {
	f := newDaemon(t, "")
	other := outsider(t)
	pids := deafTerminals(t, f, "exec sleep 60", "deaf1", "deaf2")
	host := hostInstance(t, f)
	if err := syscall.Kill(host.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	f.stop()
	for _, pid := range pids {
		if testenv.Running(pid) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("terminal pid %d outlived the shutdown: %s", pid, b)
		}
	}
	if !testenv.Running(other.Process.Pid) {
		t.Error("the shutdown killed a process the daemon did not start")
	}
}

// The same attack at once: the program kills its instance daemon before the start can even be
// answered, so this daemon may never learn the program's pid. The kernel kills it with its
// parent (term.Spec.DieWithParent). It is found by the terminal name in its environment.
func TestTerminalThatKillsItsInstanceDaemonAtOnceDoesNotOutliveIt(t *testing.T) {
	f := newDaemon(t, "")
	name := fmt.Sprintf("quick%d", os.Getpid())
	// The start may see the instance daemon die before it replies.
	_, _ = f.kw(f.mgmt(), "start", name, "--instance", "host", "--", "sh", "-c", "trap '' HUP; kill -9 $PPID; exec sleep 60")
	host := hostInstance(t, f)
	for deadline := time.Now().Add(10 * time.Second); host.Valid; host = hostInstance(t, f) {
		if time.Now().After(deadline) {
			t.Fatal("the program did not kill its instance daemon")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, pid := range leftAfter(10*time.Second, "KURUWA_TERMINAL="+name) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		t.Errorf("pid %d, the terminal's program, outlived its instance daemon by 10 s", pid)
	}
}

// leftAfter waits up to d for every process whose environment holds kv to be gone, and
// returns those still running then.
func leftAfter(d time.Duration, kv string) []int {
	deadline := time.Now().Add(d)
	for {
		left := withEnv(kv)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// withEnv returns the running processes whose environment holds kv.
func withEnv(kv string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid := atoi(e.Name())
		if pid <= 0 || !testenv.Running(pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), kv) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A main daemon that is killed (or crashes) cannot shut its instances down, and nothing can
// reach them after it: each instance daemon sees its creator's watch connection end and shuts
// down as if asked, ending its terminals — one that ignores SIGHUP and its group's child too.
func TestMainDaemonKilledTakesItsInstancesWithIt(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "kwk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	main := exec.Command(kuruwadBin, "daemon", "--dir", dir+"/k")
	if err := main.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = main.Process.Kill(); _ = main.Wait() })
	f := &fixture{t: t, dir: dir, manage: dir + "/k/manage/sock"}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := f.kw(f.mgmt(), "ls"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("kuruwad did not start")
		}
	}
	pids := deafTerminals(t, f, "exec sleep 60", "left")
	host := hostInstance(t, f)
	t.Cleanup(func() {
		if testenv.Running(host.PID) {
			_ = syscall.Kill(host.PID, syscall.SIGKILL)
		}
	})
	if err := main.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = main.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range append(pids, host.PID) {
		for testenv.Running(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if testenv.Running(pid) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Errorf("pid %d outlived its main daemon by 10 s: %s", pid, b)
		}
	}
}

// The same attack in the other kinds of instance: one with a pid namespace of its own
// (bubblewrap), which ends with its init, and one whose init execs the instance daemon in this
// daemon's namespace (env). The programs are found by the terminal name in their environment.
func TestInstanceTerminalThatKillsItsInstanceDaemonDoesNotOutliveIt(t *testing.T) {
	bwrap(t)
	f := newDaemon(t, boxConfig)
	for _, def := range []string{"box", "plain"} {
		t.Run(def, func(t *testing.T) {
			f.must(f.mgmt(), "instance", "start", def, "--name", def+"-k")
			name := fmt.Sprintf("k-%s-%d", def, os.Getpid())
			f.must(f.mgmt(), "start", name, "--instance", def+"-k", "--", "sh", "-c", "trap '' HUP; sleep 60 & echo ready; read x; kill -9 $PPID; exec sleep 60")
			f.waitScreen(f.mgmt(), name, "ready")
			if n := len(withEnv("KURUWA_TERMINAL=" + name)); n != 2 {
				t.Fatalf("%d processes of the terminal, want its shell and its child", n)
			}
			_, _ = f.kw(f.mgmt(), "send", name, "go\n")
			for _, pid := range leftAfter(10*time.Second, "KURUWA_TERMINAL="+name) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				t.Errorf("pid %d of the terminal outlived its instance daemon by 10 s: %s", pid, b)
			}
		})
	}
}

// What a terminal's program leaves running after it exited — a background job that ignores
// SIGHUP, as `nohup server &` and exit leaves one — is not the terminal's any more: the
// instance daemon's shutdown never signals an exited terminal, and the orphan handling must not
// either, though the job is still in the exited program's process group.
func TestShutdownLeavesWhatAnExitedTerminalLeftRunning(t *testing.T) {
	f := newDaemon(t, "")
	f.must(f.mgmt(), "start", "done", "--instance", "host", "--", "sh", "-c", "trap '' HUP; sleep 60 & echo child=$!; sleep 0.2")
	child := childOnScreen(t, f.waitScreen(f.mgmt(), "done", "child="))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !f.status("done").Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the terminal's program did not exit")
		}
	}
	f.stop()
	if !testenv.Running(child) {
		t.Errorf("the shutdown killed pid %d, which the exited terminal's program left running", child)
	}
}
