package tracked

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// The descriptors bwrap inherits (ExtraFiles, in this order).
const (
	blockFD   = 3 // bwrap waits on it before it runs the command; closed once the run's gate passed
	argsFD    = 4 // bwrap's own command line (--args), so no host path shows in /proc/*/cmdline
	seccompFD = 5 // the compiled seccomp filter (--add-seccomp-fd)
	infoFD    = 6 // bwrap's --info-fd: it writes the sandbox child's pid there once it exists
)

// sandboxPath is PATH inside the sandbox unless the request sets one.
const sandboxPath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// DefaultRunID is the uid and gid a sandboxed run has in the initial user namespace (and, mapped
// to itself, inside its own) unless Config.RunUID/RunGID say otherwise. It owns nothing on the
// guest but what runs create in their current/.
const DefaultRunID = 2000

// Paths of /proc masked or made read-only in every sandbox: the defaults of runc (the OCI
// runtime's MaskedPaths and ReadonlyPaths). Only those that exist on this kernel are named to
// bwrap (it cannot create a mount point inside procfs).
var (
	maskedProcFiles = []string{"/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug"}
	maskedProcDirs = []string{"/proc/acpi", "/proc/asound", "/proc/scsi"}
	readonlyProc   = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// procMasks returns bwrap's arguments that mask and protect /proc, for the paths that exist on
// this kernel (stat is os.Lstat outside tests).
func procMasks(stat func(string) (os.FileInfo, error)) []string {
	var a []string
	for _, p := range maskedProcFiles {
		if _, err := stat(p); err == nil {
			a = append(a, "--ro-bind", "/dev/null", p)
		}
	}
	for _, p := range maskedProcDirs {
		if _, err := stat(p); err == nil {
			a = append(a, "--tmpfs", p, "--remount-ro", p)
		}
	}
	for _, p := range readonlyProc {
		if _, err := stat(p); err == nil {
			a = append(a, "--ro-bind", p, p)
		}
	}
	return a
}

// bwrapArgs builds bubblewrap's options for one run, which it reads from --args (bwrap takes
// only options there: the command follows "--" on its own command line, which so shows nothing
// but the run's argv). The view is
// minimal: system dirs read-only, current/ writable at its own path, shared/ at its own path,
// tmpDir as /tmp, /proc of the run's own PID namespace with runc's masks, a minimal /dev, no
// /sys. Nothing else of the host is visible: not the records dir, the daemon's state, its
// listeners' sockets, nor other sessions.
//
// The run is an unprivileged user: bwrap is started as cfg's run uid/gid, creates a user
// namespace mapping that id to itself and no other (--disable-userns: no nested ones), drops
// every capability there and installs the seccomp filter last, after its own setup.
//
// --die-with-parent is deliberate: background servers of the agent cannot outlive their run
// anyway (the PID namespace dies with its init). bwrap itself also gets Pdeathsig, see prepare.
func bwrapArgs(cfg *Config, req *StartRequest, cwd, tmpDir string, masks []string) []string {
	a := []string{
		"--unshare-user", "--uid", strconv.Itoa(int(cfg.RunUID)), "--gid", strconv.Itoa(int(cfg.RunGID)), "--disable-userns",
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent",
	}
	if req.attach == nil || req.attach.term == nil { // a terminal's run makes its own (StartAttached)
		a = append(a, "--new-session")
	}
	a = append(a,
		"--cap-drop", "ALL",
		"--proc", "/proc", "--dev", "/dev",
		"--block-fd", strconv.Itoa(blockFD),
		"--add-seccomp-fd", strconv.Itoa(seccompFD),
	)
	if cfg.UnshareNet && req.Extra.NetNS == nil { // a session's namespace is entered by the fork (start.go)
		a = append(a, "--unshare-net")
	}
	a = append(a, masks...)
	for _, d := range cfg.SystemDirs {
		if target, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", target, d) // merged /usr: /bin -> usr/bin
			continue
		}
		a = append(a, "--ro-bind", d, d)
	}
	ws := req.Workspace
	if tmpDir == "" { // no space for a private /tmp (makeRunDir): an empty read-only one
		a = append(a, "--tmpfs", "/tmp", "--remount-ro", "/tmp")
	} else {
		a = append(a, "--bind", tmpDir, "/tmp")
	}
	if cfg.SharedWritable || ws.SharedWritable {
		a = append(a, "--bind", ws.Shared, ws.Shared)
	} else {
		a = append(a, "--ro-bind", ws.Shared, ws.Shared)
	}
	for _, mt := range req.Extra.Mounts {
		op := "--bind"
		if mt.ReadOnly {
			op = "--ro-bind"
		}
		a = append(a, op, mt.Source, mt.Target)
	}
	a = append(a, "--bind", ws.Current, ws.Current, "--chdir", cwd, "--clearenv")
	for _, kv := range sandboxEnv(req) {
		a = append(a, "--setenv", kv[0], kv[1])
	}
	return a
}

// sandboxEnv returns the run's environment, sorted by name.
func sandboxEnv(req *StartRequest) [][2]string {
	env := map[string]string{"PATH": sandboxPath, "TMPDIR": "/tmp"}
	for k, v := range req.Env {
		env[k] = v
	}
	for k, v := range req.Extra.Env {
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
