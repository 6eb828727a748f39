package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/allox-os/allox/internal/marker"
	"golang.org/x/sys/unix"
)

// TestPID1InNamespaces runs init as a real PID 1, in new PID, mount, UTS, network, IPC and
// cgroup namespaces: real mounts, a real loop device, mkfs.btrfs and Btrfs for the RAM store,
// netlink, kill(-1) and reboot(2), which in a PID namespace ends the namespace with SIGINT.
// A wrapper shell binds the test's manifest over /etc and a file over /dev/console, then execs.
func TestPID1InNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, mounts and loop devices; run: sudo go test ./init -run PID1")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("mkfs.btrfs not installed (apt-get install btrfs-progs)")
	}
	dir := t.TempDir()
	a := manifest.Service{Name: "a", Restart: manifest.RestartAlways,
		Command: []string{"/bin/sh", "-c", "echo up; hostname; touch /run/a.ready; exec sleep 100"},
		Ready:   &manifest.Ready{Path: "/run/a.ready"}}
	orphan := manifest.Service{Name: "orphan", Restart: manifest.RestartNever, // leaves a child to kill(-1)
		Command: []string{"/bin/sh", "-c", "sleep 100 & exit 0"}}
	m := testManifest(a, orphan)
	m.Network = &manifest.Network{Interface: "eth0", Address: "10.0.2.15/24", Gateway: "10.0.2.2"}
	writeManifest(t, dir, m)
	consoleFile := filepath.Join(dir, "console")
	if err := os.WriteFile(consoleFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	script := "mount --make-rprivate / && mount --bind " + dir + "/etc /etc && " +
		"mount --bind " + consoleFile + " /dev/console && exec " + os.Args[0]
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{runMainEnv + "=1"}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS |
		unix.CLONE_NEWUTS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP}
	exited := make(chan struct{})
	p := startInit(t, cmd, &tail{path: consoleFile, done: exited})
	go func() { cmd.Wait(); close(exited) }()

	p.await(t, marker.BootDone)
	for _, want := range []string{"[a] up", "[a] allox-test", marker.StoreFallback, marker.Ready("a")} {
		if p.index(want) < 0 {
			t.Errorf("no %q on the console", want)
		}
	}
	if err := cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("init did not go down in 30s")
	}
	p.await(t, marker.PowerOff)
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != unix.SIGINT {
		t.Errorf("namespace ended with %v, want SIGINT (reboot(POWER_OFF) in a PID namespace)", cmd.ProcessState)
	}
	p.mu.Lock()
	console := strings.Join(p.lines, "\n")
	p.mu.Unlock()
	for _, bad := range []string{"level=ERROR", "shutdown incomplete"} {
		if strings.Contains(console, bad) {
			t.Errorf("console has %q", bad)
		}
	}
	assertLoopFreed(t)
}

// assertLoopFreed checks that the RAM store's loop device went away with the unmount.
func assertLoopFreed(t *testing.T) {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "/run/allox/store.img") {
			t.Errorf("%s still backs %s", f, b)
		}
	}
}

// tail reads a file that another process appends to, until done is closed.
type tail struct {
	path string
	f    *os.File
	done <-chan struct{}
}

func (t *tail) Read(p []byte) (int, error) {
	for {
		if t.f == nil {
			f, err := os.Open(t.path)
			if err != nil {
				return 0, err
			}
			t.f = f
		}
		n, err := t.f.Read(p)
		if n > 0 || (err != nil && !errors.Is(err, io.EOF)) {
			return n, err
		}
		select {
		case <-t.done:
			if n, err := t.f.Read(p); n > 0 {
				return n, err
			}
			return 0, io.EOF
		case <-time.After(20 * time.Millisecond):
		}
	}
}
