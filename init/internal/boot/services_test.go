package boot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
)

var testServices = []manifest.Service{
	{Name: "workspace-daemon", MemoryLow: 64 << 20, OOMScoreAdj: -997},
	{Name: "kata-agent", MemoryMin: 16 << 20, MemoryLow: 32 << 20},
	{Name: "plain"},
}

func TestServiceGroupsTable(t *testing.T) {
	want := `(optional) mkdir -p -m 0755 /sys/fs/cgroup/system
(optional) enable cgroup controllers in /sys/fs/cgroup/system/cgroup.subtree_control
(optional) echo 16777216 > /sys/fs/cgroup/system/memory.min
(optional) echo 100663296 > /sys/fs/cgroup/system/memory.low
(optional) mkdir -p -m 0755 /sys/fs/cgroup/system/workspace-daemon
(optional) echo 67108864 > /sys/fs/cgroup/system/workspace-daemon/memory.low
(optional) mkdir -p -m 0755 /sys/fs/cgroup/system/kata-agent
(optional) echo 16777216 > /sys/fs/cgroup/system/kata-agent/memory.min
(optional) echo 33554432 > /sys/fs/cgroup/system/kata-agent/memory.low
(optional) mkdir -p -m 0755 /sys/fs/cgroup/system/plain
`
	if diff := cmp.Diff(want, tableText(ServiceGroups(testServices))); diff != "" {
		t.Errorf("service groups table (-want +got):\n%s", diff)
	}
}

// TestServiceGroupsRun runs the table against a directory standing in for cgroupfs, whose
// interface files exist as the kernel would provide them.
func TestServiceGroupsRun(t *testing.T) {
	root := t.TempDir()
	sys := &Sys{Root: root}
	cg := filepath.Join(root, ServiceCgroupDir)
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control", "memory.min", "memory.low"} {
		content := ""
		if f == "cgroup.controllers" {
			content = "cpu memory pids\n"
		}
		if err := os.WriteFile(filepath.Join(cg, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	steps := ServiceGroups(testServices)
	var failed []string
	err := Run(context.Background(), sys, steps, func(r Result) {
		if r.Done && r.Err != nil {
			failed = append(failed, r.Step.String())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// The children's files do not exist in a plain directory: those writes fail, as they would
	// without the memory controller, and only warn.
	if len(failed) != 3 || !strings.Contains(failed[0], "workspace-daemon/memory.low") {
		t.Errorf("failed steps = %q", failed)
	}
	for f, want := range map[string]string{"memory.min": "16777216", "memory.low": "100663296"} {
		if b, _ := os.ReadFile(filepath.Join(cg, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(cg, "kata-agent")); err != nil || !fi.IsDir() {
		t.Errorf("kata-agent group: %v", err)
	}
}
