package tracked

import (
	"os"
	"path/filepath"
	"strings"
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
	return resolveCwd(ws.Current, req.Cwd)
}

func resolveCwd(current, cwd string) (string, error) {
	if filepath.IsAbs(cwd) || strings.ContainsRune(cwd, 0) {
		return "", invalid("cwd", "%q: must be relative to current/, e.g. \"src\"", cwd)
	}
	rel := filepath.Clean(cwd)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", invalid("cwd", "%q: leaves current/", cwd)
	}
	root, err := filepath.EvalSymlinks(current)
	if err != nil {
		return "", invalid("workspace", "%q: %v", current, err)
	}
	p, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		return "", invalid("cwd", "%q: %v", cwd, err)
	}
	if p != root && !strings.HasPrefix(p, root+"/") {
		return "", invalid("cwd", "%q: resolves outside current/", cwd)
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		return "", invalid("cwd", "%q: not a directory", cwd)
	}
	// The sandbox binds current/ at its own path, so the same path is valid inside.
	return filepath.Join(current, strings.TrimPrefix(p, root)), nil
}

func under(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
