package shutdown

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

type log struct {
	mu    sync.Mutex
	lines []string
}

func (l *log) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func TestSequenceOrder(t *testing.T) {
	var l log
	alive := 2 // processes that die only of SIGKILL
	s := Sequence{
		StopServices: func() { l.add("stop services") },
		KillAll: func(sig unix.Signal) error {
			l.add("kill -%d -1", sig)
			if sig == unix.SIGKILL {
				alive = 0
			}
			return nil
		},
		Settled: func() bool { return alive == 0 },
		Sync:    func() { l.add("sync") },
		Unmount: func(target string, flags int) error {
			l.add("umount %s %d", target, flags)
			if target == "/dev" && flags == 0 {
				return unix.EBUSY
			}
			return nil
		},
		Mounts:   []string{"/proc", "/dev", "/store"},
		KillWait: 50 * time.Millisecond,
	}
	if err := s.Run(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"stop services", "kill -15 -1", "kill -9 -1", "sync",
		"umount /store 0", "umount /dev 0", fmt.Sprintf("umount /dev %d", unix.MNT_DETACH), "umount /proc 0",
	}
	if diff := cmp.Diff(want, l.lines); diff != "" {
		t.Errorf("sequence (-want +got):\n%s", diff)
	}
}

func TestSequenceIsBounded(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	s := Sequence{
		Sync:    func() { <-block },
		Unmount: func(string, int) error { return errors.New("EINVAL") },
		Mounts:  []string{"/store"},
		KillAll: func(unix.Signal) error { return nil },
		Settled: func() bool { return false },
		Timeout: 50 * time.Millisecond, KillWait: 10 * time.Millisecond,
	}
	start := time.Now()
	err := s.Run()
	for _, want := range []string{"processes are left after SIGKILL", "sync: not done after 50ms", "unmount /store: EINVAL; lazy: EINVAL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Run error %v, want it to contain %q", err, want)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Run took %v despite its bounds", took)
	}
}

func TestForSignal(t *testing.T) {
	for sig, want := range map[unix.Signal]string{
		unix.SIGTERM: "poweroff", unix.SIGUSR2: "poweroff", unix.SIGUSR1: "poweroff", unix.SIGPWR: "poweroff",
		unix.SIGINT: "reboot", unix.SIGHUP: "ignored", unix.SIGQUIT: "ignored",
	} {
		got := "ignored"
		if a, ok := ForSignal(sig); ok {
			got = a.String()
		}
		if got != want {
			t.Errorf("ForSignal(%v) = %s, want %s", sig, got, want)
		}
	}
	if PowerOff.Cmd() != unix.LINUX_REBOOT_CMD_POWER_OFF || Reboot.Cmd() != unix.LINUX_REBOOT_CMD_RESTART {
		t.Error("reboot(2) commands")
	}
}
