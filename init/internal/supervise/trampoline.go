package supervise

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// TrampolineName is the argv[0] by which init, started again as a service's first process, gives
// itself the service's RLIMIT_NOFILE (and oom_score_adj) and then execs the service: both survive
// execve, so the service runs with them from its first instruction (set from outside after the
// exec, a fast service could read or act on the defaults first). Only a service with an
// open-file limit starts through it; an oom_score_adj alone is inherited at the fork (spawn).
const TrampolineName = "allox-exec"

// trampolineArgv is the argv init is started with for s: TrampolineName, NOFILE, OOMSCOREADJ,
// then the resolved path and the service's argv.
func trampolineArgv(s *serviceLimits, path string, argv []string) []string {
	return append([]string{TrampolineName, strconv.FormatUint(s.nofile, 10), strconv.Itoa(s.oomScoreAdj), path}, argv...)
}

type serviceLimits struct {
	nofile      uint64
	oomScoreAdj int
}

// Trampoline runs the trampoline when args[0] is TrampolineName: it applies the limits and execs
// the service, and returns only on failure (ok true, err why). For any other args it returns
// ok false at once. Init's main calls it first.
func Trampoline(args []string) (ok bool, err error) {
	if len(args) == 0 || args[0] != TrampolineName {
		return false, nil
	}
	if len(args) < 5 {
		return true, fmt.Errorf("%s: want NOFILE OOMSCOREADJ PATH ARGV0 [ARG...], got %q", TrampolineName, args[1:])
	}
	nofile, err1 := strconv.ParseUint(args[1], 10, 64)
	adj, err2 := strconv.Atoi(args[2])
	if err := errors.Join(err1, err2); err != nil {
		return true, fmt.Errorf("%s: %w", TrampolineName, err)
	}
	if nofile > 0 {
		// syscall's Setrlimit, not x/sys/unix's: it also tells Exec not to restore the soft limit
		// the Go runtime raised at start.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: nofile, Max: nofile}); err != nil {
			return true, fmt.Errorf("%s: RLIMIT_NOFILE %d: %w", TrampolineName, nofile, err)
		}
	}
	if adj != 0 {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(adj)), 0); err != nil {
			return true, fmt.Errorf("%s: oom_score_adj %d: %w", TrampolineName, adj, err)
		}
	}
	err = syscall.Exec(args[3], args[4:], os.Environ())
	return true, fmt.Errorf("%s: exec %s: %w", TrampolineName, args[3], err)
}
