package main

import (
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/allox-os/allox/internal/marker"
	"golang.org/x/sys/unix"
)

func TestDryBootAndPowerOff(t *testing.T) {
	root := t.TempDir()
	a := manifest.Service{Name: "a", Restart: manifest.RestartAlways,
		Command: []string{"/bin/sh", "-c", "echo up; touch " + root + "/run/a.ready; exec sleep 100"},
		Ready:   &manifest.Ready{Path: "/run/a.ready"}}
	b := manifest.Service{Name: "b", Restart: manifest.RestartAlways, After: []string{"a"},
		Command: []string{"/bin/sh", "-c", "exit 99"}}
	writeManifest(t, root, testManifest(a, b))
	p := dryInit(t, root)
	p.await(t, marker.BootDone)
	p.await(t, marker.Exited("b", manifest.ExitOneShot))
	if err := p.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.await(t, marker.PowerOff)
	<-p.eof
	if !p.cmd.ProcessState.Success() {
		t.Errorf("exit %v, want 0 after a requested power-off", p.cmd.ProcessState)
	}
	inOrder(t, p.markers(),
		marker.StoreFallback+" serial=allox-test-absent size_mib=256",
		marker.Ready("a"), marker.Ready("b"), marker.BootDone,
		marker.Exited("a", 128+int(unix.SIGTERM)), marker.PowerOff)
	inOrder(t, p.markers(), marker.Ready("b"), marker.Exited("b", manifest.ExitOneShot), marker.PowerOff)
	if got := p.markers(); len(got) != 7 {
		t.Errorf("markers %q, want 7", got)
	}
	if p.index("[a] up") < 0 {
		t.Error("service output missing from the console")
	}
}

func TestDryMissingManifest(t *testing.T) {
	p := dryInit(t, t.TempDir())
	p.await(t, marker.PowerOff)
	<-p.eof
	if code := p.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d, want 1 after a failed step", code)
	}
	got := p.markers()
	if len(got) != 2 || got[1] != marker.PowerOff ||
		!strings.HasPrefix(got[0], marker.StepFailed+" read manifest /etc/allox/manifest.json: open ") {
		t.Errorf("markers %q, want the failed step then power-off", got)
	}
}

func TestDryCriticalServicePowersOff(t *testing.T) {
	root := t.TempDir()
	agent := manifest.Service{Name: "agent", Restart: manifest.RestartNever, Critical: true,
		Command: []string{"/bin/sh", "-c", "sleep 0.2; exit 1"}}
	writeManifest(t, root, testManifest(agent))
	p := dryInit(t, root)
	p.await(t, marker.PowerOff)
	<-p.eof
	want := []string{
		marker.StoreFallback + " serial=allox-test-absent size_mib=256",
		marker.Ready("agent"), marker.Exited("agent", 1), marker.PowerOff,
	}
	inOrder(t, p.markers(), want...)
	inOrder(t, p.markers(), marker.Ready("agent"), marker.BootDone, marker.PowerOff)
	if code := p.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}

// inOrder checks that want appear in got in this order (other lines may come between).
func inOrder(t *testing.T, got []string, want ...string) {
	t.Helper()
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("markers %q: %q missing or out of order (want the order %q)", got, want[i], want)
	}
}
