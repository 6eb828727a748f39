package fleet_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/fleet/internal/fleettest"
	"github.com/allox-os/allox/internal/testenv"
)

// What a node does with the pushed image, without Kubernetes: pull it from the registry, run the
// image's own /allox-deploy (the entrypoint, a static binary) against a scratch host root as the
// DaemonSet pod would, then its preStop cleanup; the node ends as it began.
// It runs on a small output directory and on the real build (out/, as make image leaves it).
func TestPulledImageInstallsOnScratchRoot(t *testing.T) {
	t.Run("small", func(t *testing.T) {
		out := fleettest.Out(t, "allox")
		pulledImageInstalls(t, out, fleettest.TrustedKey(t, out))
	})
	t.Run("real build", func(t *testing.T) { // as make image leaves it: not signed
		pulledImageInstalls(t, testenv.NeedOut(t, "manifest.json", "kata/install.sh", "bzImage"), "none")
	})
}

func pulledImageInstalls(t *testing.T, out, trusted string) {
	root := fleettest.ScratchRoot(t, "version = 3\n")
	host := newRegistry(t, nil)
	a, pinned := push(t, out, host+"/allox/"+"img:e2e")
	image, err := pull(t, pinned)
	if err != nil {
		t.Fatal(err)
	}
	before := fleettest.Listing(t, root)
	deploy := func(args ...string) {
		cmd := exec.CommandContext(context.Background(), filepath.Join(image, "allox-deploy"), append(args,
			"-root="+root, "-payload="+filepath.Join(image, "payload"), "-restart-containerd=false", "-label-node=false", "-verify-key="+trusted)...)
		cmd.Env = []string{"PATH=/nonexistent"} // the pod image has no shell or tools of its own
		out, err := cmd.CombinedOutput()
		t.Logf("allox-deploy %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatal(err)
		}
	}
	deploy("install", "-once")
	fleettest.CheckInstalled(t, root, "/etc/kata-containers/"+a.Name, filepath.Join(image, "payload"))
	deploy("cleanup")
	if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
		t.Errorf("after cleanup the scratch root is not as before:\n%s", d)
	}
}

// The pod's life without the preStop hook: install, ready (the readiness probe's status), then
// SIGTERM, on which the installer cleans up before it exits, as kata-deploy 4.1 does.
func TestInstallerCleansUpOnSIGTERM(t *testing.T) {
	root := fleettest.ScratchRoot(t, "version = 3\n")
	pl := fleettest.Out(t, "allox")
	before := fleettest.Listing(t, root)
	args := []string{"-root=" + root, "-payload=" + pl, "-restart-containerd=false", "-label-node=false", "-verify-key=" + fleettest.TrustedKey(t, pl)}
	var log bytes.Buffer
	pod := exec.Command(installer(t), append([]string{"install"}, args...)...)
	pod.Stdout, pod.Stderr = &log, &log
	if err := pod.Start(); err != nil {
		t.Fatal(err)
	}
	ready := false
	for range 200 {
		if exec.Command(installer(t), append([]string{"status"}, args...)...).Run() == nil {
			ready = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !ready {
		pod.Process.Kill()
		pod.Wait()
		t.Fatalf("status never succeeded; the installer said:\n%s", log.String())
	}
	if err := pod.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := pod.Wait()
	t.Logf("allox-deploy install, then SIGTERM:\n%s", log.String())
	if err != nil {
		t.Fatalf("the installer exited with %v after SIGTERM", err)
	}
	if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
		t.Errorf("after SIGTERM the scratch root is not as before:\n%s", d)
	}
}
