package history

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// cgroup2Mount finds the cgroup v2 mount from /proc/self/mountinfo. The
// recorder needs one: no mount is a failure, not a skip.
func cgroup2Mount(t testing.TB) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				return fields[4]
			}
		}
	}
	t.Fatal("no cgroup2 mount: the recorder scopes by cgroup v2")
	return ""
}

// requireRoot fails a test that needs to load BPF when not run as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF needs root: run go test as root (sudo -E go test ./services/internal/effects/history/)")
	}
}

// newCgroup creates a cgroup below the cgroup2 mount (and dirs below it),
// removed at cleanup once empty.
func newCgroup(t testing.TB, name string, sub ...string) string {
	t.Helper()
	dir := filepath.Join(cgroup2Mount(t), "history-test-"+name+"-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		for _, s := range sub {
			_ = os.Remove(filepath.Join(dir, s))
		}
		_ = os.Remove(dir)
	})
	for _, s := range sub {
		if err := os.Mkdir(filepath.Join(dir, s), 0o755); err != nil {
			t.Fatalf("create cgroup: %v", err)
		}
	}
	return dir
}

func cgroupID(t testing.TB, dir string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// shell starts sh -c script, in cgroup when it is not empty (clone3
// CLONE_INTO_CGROUP, so the shell's first instruction already runs there).
func shell(t testing.TB, cgroup, script string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if cgroup != "" {
		fd, err := syscall.Open(cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start shell: %v", err)
	}
	return cmd
}

// syncBuffer is an io.Writer safe to read while the recorder writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// stopAndRead stops r and decodes the history it wrote (read with bytes).
func stopAndRead(t testing.TB, r *Recorder, bytesOf func() []byte) (Summary, []Event) {
	t.Helper()
	sum, err := r.Stop()
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	evs, err := ReadAll(bytes.NewReader(bytesOf()))
	if err != nil {
		t.Fatalf("decode history: %v", err)
	}
	return sum, evs
}
