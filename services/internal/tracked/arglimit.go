package tracked

import (
	"golang.org/x/sys/unix"
)

// Linux's execve limits (fs/exec.c): every argv and envp string, with its NUL, is at most
// maxArgStrlen (MAX_ARG_STRLEN, 32 pages); all of them together, with one pointer each, at most
// a quarter of the stack limit, capped at 3/4 of _STK_LIM and never below ARG_MAX.
const (
	maxArgStrlen = 32 * 4096
	minArgMax    = 128 << 10 // ARG_MAX
	maxArgMax    = (8 << 20) / 4 * 3
	ptrSize      = 8
)

// argMax is the kernel's limit on argv and envp together for an exec by this process (and so by
// bwrap, which inherits its stack limit): glibc's sysconf(_SC_ARG_MAX) with the kernel's cap.
func argMax() int {
	limit := maxArgMax
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY {
		limit = min(limit, int(rl.Cur/4))
	}
	return max(limit, minArgMax)
}

// checkArgSize refuses, before anything starts, a command line that the run's exec would refuse
// with E2BIG: argv and the run's whole environment (the request's env and what the sandbox adds)
// count, as the kernel counts them.
func checkArgSize(req *StartRequest, limit int) error {
	total := 0
	for i, a := range req.Argv {
		if len(a)+1 > maxArgStrlen {
			return invalid("argv", "element %d is %d bytes; exec takes at most %d per argument: pass long inputs on stdin or in a file in current/", i, len(a), maxArgStrlen-1)
		}
		total += len(a) + 1 + ptrSize
	}
	env := sandboxEnv(req)
	for _, kv := range env {
		n := len(kv[0]) + 1 + len(kv[1]) + 1
		if n > maxArgStrlen && req.Env[kv[0]] == kv[1] {
			return invalid("env", "%s is %d bytes; exec takes at most %d per variable: pass long inputs on stdin or in a file in current/", kv[0], n-1, maxArgStrlen-1)
		}
		total += n + ptrSize
	}
	if total > limit {
		return invalid("argv", "argv and the run's environment take %d bytes; exec takes at most %d (ARG_MAX from the stack limit): pass long inputs on stdin or in a file in current/", total, limit)
	}
	return nil
}
