package tracked

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/allox-os/allox/internal/cgroup"
	"github.com/allox-os/allox/internal/limit"
	"github.com/allox-os/allox/services/internal/seccomp"
)

// Config configures a Manager.
type Config struct {
	CgroupMount    string   // "" = detect: /sys/fs/cgroup if cgroup2, else /sys/fs/cgroup/unified
	CgroupParent   string   // e.g. "allox" → <mount>/allox/<agent>/<session>/<run>
	RecordsDir     string   // run records and output, outside every workspace
	Bwrap          string   // "" = "bwrap" on PATH
	MaxOutputBytes int64    // per stream; 0 = 16 MiB
	SystemDirs     []string // read-only binds; nil = /usr /bin /sbin /lib /lib64 /etc (those that exist)
	SharedWritable bool     // bind shared/ writable; default read-only
	UnshareNet     bool     // private network namespace (loopback only); default shares the guest's
	// RunLimits are every run's limits, capped by its session's; SessionLimits returns a session's
	// own limits (nil: none), asked whenever a run group is made. Each limit applies only where
	// its controller exists (see Manager.Enforced).
	RunLimits     limit.Set
	SessionLimits func(agent, session string) (limit.Set, error)
	// RunsMemoryReserve, if > 0, sets the parent group's memory.max to MemTotal minus it: all runs
	// together leave that much to the control plane.
	RunsMemoryReserve int64
	// Retention bounds the records kept per session, pruned at start and after each run ends;
	// the zero value keeps every record (the daemon passes DefaultRetention or its flags).
	Retention Retention
	// AllowManaged permits StartRequest.Managed runs (the daemon's --managed-execution).
	AllowManaged bool
	// RunUID and RunGID are the unprivileged identity of every sandboxed run, in the initial user
	// namespace and (mapped to itself) in the run's own; 0 means DefaultRunID. Root is never a
	// run's identity. The session's current/ and what the run creates there belong to it.
	RunUID, RunGID uint32
	// Notify, if set, is told of what happens to runs without a request: EventExit once a run's
	// record is final (its command ended, was killed or timed out, or a restart found it live),
	// EventPrune when the retention policy removed an ended run's record. It is called from the
	// manager's goroutines and must not block for long.
	Notify func(event string, st *Status)
	// Seccomp is the compiled filter handed to bwrap (--add-seccomp-fd); nil means the default
	// filter of package seccomp.
	Seccomp []byte

	procMasks []string // bwrap's /proc masks for this kernel, computed once
}

const defaultMaxOutput = 16 << 20

var defaultSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"}

func (c *Config) normalize() error {
	if c.CgroupMount == "" {
		m, err := detectCgroupMount()
		if err != nil {
			return err
		}
		c.CgroupMount = m
	}
	if c.CgroupParent == "" || !validParent(c.CgroupParent) {
		return fmt.Errorf("cgroup parent %q: must be a relative path of safe names, e.g. \"allox\"", c.CgroupParent)
	}
	if !filepath.IsAbs(c.RecordsDir) {
		return fmt.Errorf("records dir %q: must be an absolute path outside every workspace", c.RecordsDir)
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = defaultMaxOutput
	}
	if c.SystemDirs == nil {
		for _, d := range defaultSystemDirs {
			if _, err := os.Lstat(d); err == nil {
				c.SystemDirs = append(c.SystemDirs, d)
			}
		}
	}
	if c.RunUID == 0 {
		c.RunUID = DefaultRunID
	}
	if c.RunGID == 0 {
		c.RunGID = DefaultRunID
	}
	if c.Seccomp == nil {
		prog, err := seccomp.Program()
		if err != nil {
			return fmt.Errorf("seccomp filter: %w", err)
		}
		c.Seccomp = prog
	}
	c.procMasks = procMasks(os.Lstat)
	if c.Bwrap == "" {
		c.Bwrap = "bwrap"
	}
	p, err := exec.LookPath(c.Bwrap)
	if err != nil {
		return fmt.Errorf("bwrap %q: %w (install bubblewrap or set Config.Bwrap)", c.Bwrap, err)
	}
	c.Bwrap = p
	return nil
}

func validParent(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if !validID(part) {
			return false
		}
	}
	return true
}

// detectCgroupMount returns /sys/fs/cgroup on a pure cgroup v2 system and
// /sys/fs/cgroup/unified on a hybrid one.
func detectCgroupMount() (string, error) {
	m, err := cgroup.DetectMount()
	if err != nil {
		return "", fmt.Errorf("%w; set Config.CgroupMount", err)
	}
	return m, nil
}
