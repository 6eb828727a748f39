package main

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyForPID1 are libraries whose package initialisers cost PID 1 time on every boot and every
// start of a service with an open-file limit (through init itself, see supervise.Trampoline): under TCG the
// containerd cgroup library with protobuf, the BPF library, logrus and D-Bus ran before init's
// first step and again before each service's exec (0.26 s of the daemon's start to ready in a
// Kata boot). Init reaches cgroups through internal/cgroupfs instead.
var heavyForPID1 = []string{
	"github.com/containerd/",
	"google.golang.org/protobuf/",
	"github.com/cilium/ebpf",
	"github.com/sirupsen/logrus",
	"github.com/godbus/dbus",
}

func TestPID1LinksNoHeavyLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/allox-os/allox/init").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, heavy := range heavyForPID1 {
			if strings.HasPrefix(pkg, heavy) {
				t.Errorf("init links %s: find the import that pulls it in (go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./init) "+
					"and use what PID 1 needs without it (internal/cgroupfs for cgroups)", pkg)
			}
		}
	}
}
