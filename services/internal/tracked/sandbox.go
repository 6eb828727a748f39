package tracked

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// blockFD is the descriptor (ExtraFiles[0]) bwrap waits on before it runs
// the command: the manager releases it once the run's gate has passed.
const blockFD = 3

// sandboxPath is PATH inside the sandbox unless the request sets one.
const sandboxPath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// bwrapArgs builds the bubblewrap command line for one run. The view is
// minimal: system dirs read-only, current/ writable at its own path, shared/
// at its own path, tmpDir as /tmp. Nothing else of the host is visible: not
// the records dir, the daemon's state or socket, nor other sessions.
//
// --die-with-parent is deliberate: the issue asks that the sandbox die with
// the daemon's supervisor, and background servers of the agent cannot outlive
// their run anyway (the PID namespace dies with its init). bwrap itself also
// gets Pdeathsig, see start.
func bwrapArgs(cfg *Config, req *StartRequest, cwd, tmpDir string) []string {
	a := []string{
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session",
		"--cap-drop", "ALL",
		"--proc", "/proc", "--dev", "/dev",
		"--block-fd", strconv.Itoa(blockFD),
	}
	if cfg.UnshareNet {
		a = append(a, "--unshare-net")
	}
	for _, d := range cfg.SystemDirs {
		if target, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", target, d) // merged /usr: /bin -> usr/bin
			continue
		}
		a = append(a, "--ro-bind", d, d)
	}
	ws := req.Workspace
	a = append(a, "--bind", tmpDir, "/tmp")
	if cfg.SharedWritable {
		a = append(a, "--bind", ws.Shared, ws.Shared)
	} else {
		a = append(a, "--ro-bind", ws.Shared, ws.Shared)
	}
	a = append(a, "--bind", ws.Current, ws.Current, "--chdir", cwd, "--clearenv")
	for _, kv := range sandboxEnv(req) {
		a = append(a, "--setenv", kv[0], kv[1])
	}
	a = append(a, "--")
	return append(a, req.Argv...)
}

// sandboxEnv returns the run's environment, sorted by name.
func sandboxEnv(req *StartRequest) [][2]string {
	env := map[string]string{"PATH": sandboxPath, "TMPDIR": "/tmp"}
	for k, v := range req.Env {
		env[k] = v
	}
	env["HOME"] = req.Workspace.Current
	env["ALLOX_AGENT_WORKSPACE"] = req.Workspace.AgentDir
	env["ALLOX_AGENT_SHARED"] = req.Workspace.Shared
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][2]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, [2]string{k, env[k]})
	}
	return out
}

// runDir is where a run's record, output and private /tmp live.
func runDir(cfg *Config, runID string) string { return filepath.Join(cfg.RecordsDir, runID) }
