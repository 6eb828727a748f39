package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestSessionNetworkNotInstalled checks that a daemon built without the session-network plugin
// refuses --session-network proxy, naming the flag and the spec change that installs the plugin,
// and that a bad mode is refused naming the flag; and the same of the session-share plugin's
// --share-tools and the monitor's --monitor-root.
func TestSessionNetworkNotInstalled(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--session-network", "proxy"}, []string{"--session-network isolated|proxy", "the session-network plugin is not installed in this image",
			`add plugins = ["session-network"] to the daemon's service block in the image spec`}},
		{[]string{"--share-tools"}, []string{"--share-tools", "the session-share plugin is not installed in this image",
			`add plugins = ["session-share"] to the daemon's service block in the image spec`}},
		{[]string{"--session-network", "open"}, []string{`--session-network "open": use disabled, isolated or proxy`}},
		{[]string{"--monitor-root", "/var/lib/allox/monitor"}, []string{"--monitor-root", "the monitor plugin is not installed in this image",
			`add plugins = ["monitor"] to the daemon's service block in the image spec`}},
	} {
		var stderr strings.Builder
		cmd := exec.Command(build(t), append([]string{"--root", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Fatalf("daemon %q: %v, want a non-zero exit\n%s", tc.args, err, stderr.String())
		}
		for _, want := range tc.want {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("daemon %q: stderr does not say %q:\n%s", tc.args, want, stderr.String())
			}
		}
	}
}
