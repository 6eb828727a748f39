package tracked

import (
	"os/exec"
	"path/filepath"
)

// managedLauncher holds a managed run until the manager releases it: the shell waits for EOF on
// the block fd, then makes TMPDIR and execs the command in its place. Nothing of the command runs
// before release, exactly as with bwrap's --block-fd, and nothing in the workspace changes before
// it either (an observer's first capture must equal the state the run started from).
const managedLauncher = `read -r _ <&3; exec 3<&-; mkdir -p "$TMPDIR" && exec "$@"`

// managedTmp is the managed path's TMPDIR, inside current/ (the seed: TMPDIR only).
const managedTmp = ".allox-tmp"

// managedCommand builds a managed (unsandboxed) run: /bin/sh as the launcher, cwd in current/,
// the sandbox's environment with TMPDIR moved into the workspace.
func managedCommand(req *StartRequest, cwd string) *exec.Cmd {
	tmp := filepath.Join(req.Workspace.Current, managedTmp)
	args := append([]string{"-c", managedLauncher, "allox-managed"}, req.Argv...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = cwd
	for _, kv := range sandboxEnv(req) {
		if kv[0] == "TMPDIR" {
			kv[1] = tmp
		}
		cmd.Env = append(cmd.Env, kv[0]+"="+kv[1])
	}
	return cmd
}
