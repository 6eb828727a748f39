package fleet_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/deploy/fleet/internal/fleettest"
)

// What a node does with the pushed image, without Kubernetes: pull it from the registry, run the
// image's own /allox-deploy (the entrypoint, a static binary) against a scratch host root as the
// DaemonSet pod would, then its preStop cleanup; the node ends as it began.
func TestPulledImageInstallsOnScratchRoot(t *testing.T) {
	root := fleettest.ScratchRoot(t, "version = 3\n")
	host := newRegistry(t, nil)
	_, pinned := push(t, fleettest.Out(t, "allox"), host+"/allox/allox:e2e")
	image, err := pull(t, pinned)
	if err != nil {
		t.Fatal(err)
	}
	before := fleettest.Listing(t, root)
	deploy := func(args ...string) {
		cmd := exec.CommandContext(context.Background(), filepath.Join(image, "allox-deploy"), append(args,
			"-root="+root, "-payload="+filepath.Join(image, "payload"), "-restart-containerd=false", "-label-node=false")...)
		cmd.Env = []string{"PATH=/nonexistent"} // the pod image has no shell or tools of its own
		out, err := cmd.CombinedOutput()
		t.Logf("allox-deploy %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatal(err)
		}
	}
	deploy("install", "-once")
	if _, err := os.Stat(filepath.Join(root, "etc/kata-containers/allox/runtime-rs/config.d/50-allox.toml")); err != nil {
		t.Errorf("after install: %v", err)
	}
	deploy("cleanup")
	if d := fleettest.DiffListing(before, fleettest.Listing(t, root)); d != "" {
		t.Errorf("after cleanup the scratch root is not as before:\n%s", d)
	}
}
