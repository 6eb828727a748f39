package proctree

import (
	"errors"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOpenWithoutBTF(t *testing.T) {
	_, err := open(filepath.Join(t.TempDir(), "vmlinux"))
	if !errors.Is(err, ErrNoBTF) {
		t.Fatalf("open without BTF: got %v, want ErrNoBTF", err)
	}
}

func TestDescendants(t *testing.T) {
	tasks := map[int]task{
		1:  {ppid: 0, startTime: 1},
		10: {ppid: 1, startTime: 100},
		11: {ppid: 10, startTime: 110},
		12: {ppid: 11, startTime: 120},
		13: {ppid: 10, startTime: 130},
		20: {ppid: 1, startTime: 200},
	}
	for _, tc := range []struct {
		name  string
		root  int
		start uint64
		want  []int
	}{
		{"subtree", 10, 100, []int{11, 12, 13}},
		{"leaf", 12, 120, nil},
		{"reused pid", 10, 99, nil},
		{"missing", 30, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := descendants(tasks, tc.root, tc.start)
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("descendants(%d) (-want +got):\n%s", tc.root, diff)
			}
		})
	}
}

func TestParseTasksRejectsTruncated(t *testing.T) {
	if _, err := parseTasks(make([]byte, 17)); err == nil {
		t.Fatal("parseTasks accepted a truncated record")
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		status uint32
		want   int
	}{
		{0, 0},
		{7 << 8, 7},
		{9, -1}, // SIGKILL
	} {
		if got := (Event{Status: syscall.WaitStatus(tc.status)}).ExitCode(); got != tc.want {
			t.Errorf("ExitCode(%#x) = %d, want %d", tc.status, got, tc.want)
		}
	}
}
