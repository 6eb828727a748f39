package tracked

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// validID reports whether s uses the short safe alphabet of ids: letters,
// digits, '.', '_', '-', at most 64 bytes, no leading dot.
func validID(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '.' {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return false
		}
	}
	return true
}

// reservedEnv are set by the sandbox and cannot be overridden.
var reservedEnv = map[string]bool{"HOME": true, "ALLOX_AGENT_WORKSPACE": true, "ALLOX_AGENT_SHARED": true}

const maxTimeout = 7 * 24 * 3600e9

// validate checks a request and returns the host path of the working
// directory (inside Workspace.Current, symlinks resolved).
func validate(req *StartRequest, allowManaged bool) (string, error) {
	if !validID(req.AgentID) {
		return "", invalid("agent_id", "%q: use letters, digits, '.', '_', '-' (no leading dot, at most 64)", req.AgentID)
	}
	if !validID(req.SessionID) {
		return "", invalid("session_id", "%q: use letters, digits, '.', '_', '-' (no leading dot, at most 64)", req.SessionID)
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return "", invalid("argv", "must name a program, e.g. [\"/bin/sh\", \"-c\", \"...\"]")
	}
	for i, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return "", invalid("argv", "element %d contains a NUL byte", i)
		}
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return "", invalid("env", "%q: names must be non-empty without '=' or NUL, values without NUL", k)
		}
		if reservedEnv[k] {
			return "", invalid("env", "%s is set by the sandbox and cannot be overridden", k)
		}
		if _, ok := req.Extra.Env[k]; ok {
			return "", invalid("env", "%s is set by the daemon for every run (a plugin's or the session socket's) and cannot be overridden: leave it out", k)
		}
	}
	if err := validateExtra(req); err != nil {
		return "", err
	}
	if req.Managed && !allowManaged {
		return "", invalid("sandbox", "managed (unsandboxed) execution is off: the daemon must be started with --managed-execution")
	}
	if req.Timeout < 0 || req.Timeout > maxTimeout {
		return "", invalid("timeout", "%s: must be between 0 (none) and 168h", req.Timeout)
	}
	ws := req.Workspace
	for _, p := range []string{ws.Current, ws.Shared, ws.AgentDir} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return "", invalid("workspace", "%q: paths must be absolute and clean", p)
		}
		if under(p, "/tmp", "/proc", "/dev") {
			return "", invalid("workspace", "%q: must not be under /tmp, /proc or /dev (the sandbox mounts its own)", p)
		}
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			return "", invalid("workspace", "%q: not a directory", p)
		}
	}
	if err := checkArgSize(req, argMax()); err != nil {
		return "", err
	}
	return resolveCwd(ws.Current, req.Cwd)
}

// resolveCwd returns the host path of the run's working directory. The kernel resolves cwd
// beneath current/ (openat2 RESOLVE_BENEATH: no "..", absolute or magic link may lead out), and
// every failure gets the same answer, so that an agent cannot learn through cwd whether a path
// outside current/ exists.
func resolveCwd(current, cwd string) (string, error) {
	if filepath.IsAbs(cwd) || strings.ContainsRune(cwd, 0) {
		return "", invalid("cwd", "%q: must be relative to current/, e.g. \"src\"", cwd)
	}
	root, err := os.Open(current)
	if err != nil {
		return "", invalid("workspace", "%q: %v", current, err)
	}
	defer root.Close()
	rootPath, err := os.Readlink(fdPath(root.Fd()))
	if err != nil {
		return "", invalid("workspace", "%q: %v", current, err)
	}
	fd, err := unix.Openat2(int(root.Fd()), filepath.Clean("./"+cwd), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return "", invalid("cwd", "%q: not a directory inside current/: name one that exists there, "+
			"reached without leaving current/ (no \"..\" and no symlink out of it)", cwd)
	}
	p, err := os.Readlink(fdPath(uintptr(fd)))
	unix.Close(fd)
	if err != nil || (p != rootPath && !strings.HasPrefix(p, rootPath+"/")) {
		return "", invalid("cwd", "%q: not a directory inside current/", cwd)
	}
	// The sandbox binds current/ at its own path, so the same path is valid inside.
	return filepath.Join(current, strings.TrimPrefix(p, rootPath)), nil
}

func fdPath(fd uintptr) string { return "/proc/self/fd/" + strconv.Itoa(int(fd)) }

func under(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// validateExtra checks the daemon's additions to a run (a fault there is the daemon's, not the
// caller's: the daemon checked them when its plugins loaded).
func validateExtra(req *StartRequest) error {
	for k, v := range req.Extra.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) || reservedEnv[k] {
			return fmt.Errorf("%w: BUG: daemon env %q is not a settable variable", ErrSandbox, k)
		}
	}
	ws := req.Workspace
	for _, mt := range req.Extra.Mounts {
		t := filepath.Clean(mt.Target)
		if !filepath.IsAbs(mt.Source) || !filepath.IsAbs(mt.Target) || t != mt.Target || t == "/" {
			return fmt.Errorf("%w: BUG: mount %s -> %s: both must be clean absolute paths", ErrSandbox, mt.Source, mt.Target)
		}
		for _, p := range []string{"/proc", "/dev", "/tmp", ws.Current, ws.Shared} {
			if p != "" && (under(t, p) || under(p, t)) {
				return fmt.Errorf("%w: BUG: mount target %s overlaps %s", ErrSandbox, t, p)
			}
		}
	}
	if len(req.Extra.Prefix) > 0 && !filepath.IsAbs(req.Extra.Prefix[0]) {
		return fmt.Errorf("%w: BUG: command prefix %q must start with an absolute path", ErrSandbox, req.Extra.Prefix)
	}
	return nil
}
