// Package cgroup is the one way the workspace daemon operates cgroup v2 groups: make a group with
// its limits, enable controllers for its children, update its limits, kill everything in it and
// wait until it is empty, freeze and thaw it and wait until the kernel says so, read the counters
// that say it hit a limit, and remove it or a whole tree of groups.
//
// It wraps github.com/containerd/cgroups/v3/cgroup2 and writes by hand only what that library
// does not do; each such place says why (Open, KillWait, Freeze, Events, Read). Listing and
// enabling controllers is internal/cgroupfs, which init uses alone: PID 1 does not link the
// library (see cgroupfs).
package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/allox-os/allox/internal/cgroupfs"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// Group is one cgroup v2 group, which may not exist yet (Load) or does (Create).
type Group struct {
	dir string // absolute directory: <mount><path>
	m   *cgroup2.Manager
}

// Load returns the group at path (absolute within the hierarchy, e.g. "/allox/a") of the cgroup2
// hierarchy mounted at mount. It creates nothing.
func Load(mount, path string) (*Group, error) {
	m, err := cgroup2.Load(path, cgroup2.WithMountpoint(mount))
	if err != nil {
		return nil, fmt.Errorf("cgroup %q below %s: %w (want a clean absolute path such as \"/allox\")", path, mount, err)
	}
	return &Group{dir: filepath.Join(mount, path), m: m}, nil
}

// At returns the group whose directory is dir, an absolute path in a cgroup2 mount, for the
// operations on the group itself (not Create).
func At(dir string) (*Group, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("cgroup directory %q: want an absolute path", dir)
	}
	return Load(dir, "/")
}

// Create makes the group at path and every missing group above it, enables the controllers that l
// sets a limit of in every group from the mount down to path's parent (a group above the leaves
// must hold no process for that), and writes l. An existing group is kept and gets l again.
func Create(mount, path string, l Limits) (*Group, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	if err := onCgroupfs(mount); err != nil {
		return nil, err
	}
	m, err := cgroup2.NewManager(mount, path, l.resources())
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", filepath.Join(mount, path), err)
	}
	return &Group{dir: filepath.Join(mount, path), m: m}, nil
}

// Dir is the group's directory.
func (g *Group) Dir() string { return g.dir }

// Exists reports whether the group's directory exists.
func (g *Group) Exists() bool {
	_, err := os.Stat(g.dir)
	return err == nil
}

// Open opens the group's directory, for clone3(CLONE_INTO_CGROUP): the library can only move a
// process that already runs (AddProc), which leaves it outside the group until it is moved; a
// process born inside the group never is. The caller closes the file.
func (g *Group) Open() (*os.File, error) { return os.Open(g.dir) }

// Controllers lists the controllers available in the group (cgroup.controllers: those its parent
// enabled for it).
func (g *Group) Controllers() ([]string, error) { return cgroupfs.Controllers(g.dir) }

// EnableForChildren enables the controllers in g's cgroup.subtree_control, so that the groups
// below g get them (cgroupfs.EnableForChildren: init does the same without this package).
func (g *Group) EnableForChildren(controllers ...string) error {
	return cgroupfs.EnableForChildren(g.dir, controllers...)
}

// Update writes l into the group (the controllers must be available in it already).
func (g *Group) Update(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	if err := onCgroupfs(g.dir); err != nil {
		return err
	}
	if err := g.m.Update(l.resources()); err != nil {
		return fmt.Errorf("cgroup %s limits: %w", g.dir, err)
	}
	return nil
}

// Procs lists the processes in the group itself (not in the groups below it).
func (g *Group) Procs() ([]uint64, error) {
	p, err := g.m.Procs(false)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", g.dir, err)
	}
	return p, nil
}

// Kill sends SIGKILL to every process in the group and below it (cgroup.kill) and returns; the
// processes die after. A group that does not exist is no error, and the library is not called
// for it: when it cannot write cgroup.kill it falls back (for kernels before 5.14, logging a
// warning) to freezing and signalling each process and, in a process that is no subreaper,
// waiting for each, which would reap the caller's own children. Every kernel here has
// cgroup.kill.
func (g *Group) Kill() error {
	if !g.Exists() {
		return nil
	}
	if err := onCgroupfs(g.dir); err != nil {
		return err
	}
	if err := g.m.Kill(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup.kill %s: %w", g.dir, err)
	}
	return nil
}

// KillWait kills the group (Kill) and waits until no process is left in it or below it, or ctx
// is done: the library's Kill does not wait (cgroup.kill only sends the signals), and a group
// cannot be removed before it is empty.
func (g *Group) KillWait(ctx context.Context) error {
	if err := g.Kill(); err != nil {
		return err
	}
	return g.wait(ctx, "populated", 0)
}

// Populated reports whether any process is in the group or below it (cgroup.events "populated";
// the library reads it only inside its memory-event loop). A group that does not exist is empty.
func (g *Group) Populated() (bool, error) {
	ev, err := g.keyed("cgroup.events")
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return ev["populated"] == 1, err
}

// Freeze freezes (frozen) or thaws the group and its descendants and waits until the kernel
// reports that state, or ctx is done; an empty group reaches it at once. The library's
// Freeze and Thaw write cgroup.freeze and wait until cgroup.freeze reads back what they wrote —
// which it does at once, as that file holds the request; the state the tasks are in is
// cgroup.events "frozen", which this waits for.
func (g *Group) Freeze(ctx context.Context, frozen bool) error {
	op, want := g.m.Thaw, uint64(0)
	if frozen {
		op, want = g.m.Freeze, 1
	}
	if err := onCgroupfs(g.dir); err != nil {
		return err
	}
	if err := op(); err != nil {
		return fmt.Errorf("cgroup.freeze %s: %w", g.dir, err)
	}
	return g.wait(ctx, "frozen", want)
}

// Frozen reports whether the kernel has frozen the group (cgroup.events "frozen").
func (g *Group) Frozen() (bool, error) {
	ev, err := g.keyed("cgroup.events")
	return ev["frozen"] == 1, err
}

// wait polls cgroup.events until key has the value want, from 20 µs up to 100 µs between reads:
// the state changes within microseconds for a group whose tasks sleep (bwrap waiting on its block
// fd), and the file's change notification is rate-limited by the kernel to one per 10 ms, too
// slow for a run's start. A group that does not exist counts as empty and thawed.
func (g *Group) wait(ctx context.Context, key string, want uint64) error {
	pause := 20 * time.Microsecond
	for {
		ev, err := g.keyed("cgroup.events")
		if errors.Is(err, fs.ErrNotExist) {
			ev, err = map[string]uint64{}, nil
		}
		if err != nil {
			return err
		}
		if ev[key] == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup %s: %s %d not reached: %w", g.dir, key, want, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Microsecond)
	}
}

// Events are the counters that say processes in a group hit a limit.
type Events struct {
	OOMKills  uint64 // memory.events oom_kill: processes killed by the OOM killer
	PidsLimit uint64 // pids.events max: forks refused by pids.max
}

// Events reads the group's limit counters; a file that does not exist (no controller, no group)
// counts as zero. memory.events comes from the library's Stat; it has no reader of pids.events
// (its pids stat is pids.current and pids.max), which is read here.
func (g *Group) Events() (Events, error) {
	var ev Events
	st, err := g.m.StatFiltered(cgroup2.StatMemoryEvents)
	if err != nil {
		return ev, fmt.Errorf("cgroup %s memory.events: %w", g.dir, err)
	}
	if st.MemoryEvents != nil {
		ev.OOMKills = st.MemoryEvents.OomKill
	}
	pe, err := g.keyed("pids.events")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ev, err
	}
	ev.PidsLimit = pe["max"]
	return ev, nil
}

// Read returns one interface file of the group as the kernel prints it ("max", a number), for
// showing a group's limits and usage: the library's Stat turns "max" into a number and has no
// cpu.weight or memory.oom.group.
func (g *Group) Read(file string) (string, error) {
	if file != filepath.Base(file) || !strings.Contains(file, ".") {
		return "", fmt.Errorf("cgroup file %q: want an interface file name such as memory.max", file)
	}
	b, err := os.ReadFile(filepath.Join(g.dir, file))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Has reports whether the group has the interface file (memory.swap.max exists only with swap).
func (g *Group) Has(file string) bool {
	_, err := os.Stat(filepath.Join(g.dir, file))
	return err == nil
}

// Delete removes the group, which must hold no process; a group that does not exist is no error.
// The library's Delete refuses a group with processes in it or below it and otherwise removes
// the empty groups below it too, deepest first, retrying while the kernel is busy.
func (g *Group) Delete() error {
	if !g.Exists() {
		return nil
	}
	if err := onCgroupfs(g.dir); err != nil {
		return err
	}
	if err := g.m.Delete(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", g.dir, err)
	}
	return nil
}

// DeleteTree kills every process in the group and below it, waits until they are gone (or ctx
// is done) and removes the group and every group below it, deepest first. A group that does not
// exist is no error.
func (g *Group) DeleteTree(ctx context.Context) error {
	if !g.Exists() {
		return nil
	}
	if err := g.KillWait(ctx); err != nil {
		return err
	}
	return g.Delete()
}

// Children lists the names of the groups directly below g (none if g does not exist).
func (g *Group) Children() ([]string, error) {
	ents, err := os.ReadDir(g.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// keyed reads a flat keyed file of the group ("populated 1\nfrozen 0\n", "max 3\n"): the
// library's parser of these is not exported.
func (g *Group) keyed(file string) (map[string]uint64, error) {
	f, err := os.Open(filepath.Join(g.dir, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: malformed line %q, want \"key number\"", f.Name(), sc.Text())
		}
		out[k] = n
	}
	return out, sc.Err()
}

// NoLimit is the value of a limit that is lifted: the kernel shows it as "max".
const NoLimit int64 = -1

// Limits are what Create and Update write into a group. A nil field is left as it is, and Create
// does not enable its controller.
type Limits struct {
	PidsMax   *int64  // pids.max, > 0 or NoLimit
	MemoryMax *int64  // memory.max, bytes ≥ 0 or NoLimit
	SwapMax   *int64  // memory.swap.max, bytes ≥ 0 or NoLimit
	CPUWeight *uint64 // cpu.weight, 1..10000 (the kernel's default is 100)
	OOMGroup  *bool   // memory.oom.group: the OOM killer kills the whole group, not one process
}

func (l Limits) validate() error {
	if l.PidsMax != nil && *l.PidsMax <= 0 && *l.PidsMax != NoLimit {
		// The library leaves pids.max alone for 0 and writes "max" for every negative value.
		return fmt.Errorf("pids.max %d: want a positive number or NoLimit", *l.PidsMax)
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"memory.max", l.MemoryMax}, {"memory.swap.max", l.SwapMax}} {
		if f.v != nil && *f.v < 0 && *f.v != NoLimit {
			return fmt.Errorf("%s %d: want bytes ≥ 0 or NoLimit", f.name, *f.v)
		}
	}
	if l.CPUWeight != nil && (*l.CPUWeight < 1 || *l.CPUWeight > 10000) {
		return fmt.Errorf("cpu.weight %d: want 1..10000", *l.CPUWeight)
	}
	return nil
}

// resources are l as the library's Resources.
func (l Limits) resources() *cgroup2.Resources {
	r := &cgroup2.Resources{}
	if l.PidsMax != nil {
		r.Pids = &cgroup2.Pids{Max: *l.PidsMax} // the library writes "max" for NoLimit
	}
	if l.MemoryMax != nil || l.SwapMax != nil || l.OOMGroup != nil {
		r.Memory = &cgroup2.Memory{Max: memory(l.MemoryMax), Swap: memory(l.SwapMax), OOMGroup: l.OOMGroup}
	}
	if l.CPUWeight != nil {
		r.CPU = &cgroup2.CPU{Weight: l.CPUWeight}
	}
	return r
}

// memory is a memory limit as the library writes it: a number, so NoLimit is MaxInt64, which the
// kernel caps to its own maximum and shows as "max".
func memory(v *int64) *int64 {
	if v == nil || *v != NoLimit {
		return v
	}
	m := int64(math.MaxInt64)
	return &m
}

// onCgroupfs refuses a directory that is not in a cgroup2 hierarchy before the library writes
// into it or removes it: its writes create missing files, and its Delete is os.RemoveAll, which
// in cgroupfs removes only empty groups but in any other directory everything.
func onCgroupfs(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s is not in a cgroup2 hierarchy: give a directory below the cgroup2 mount (/sys/fs/cgroup or /sys/fs/cgroup/unified)", dir)
	}
	return nil
}

// DetectMount returns the cgroup2 mount: /sys/fs/cgroup on a pure cgroup v2 system,
// /sys/fs/cgroup/unified on a hybrid one.
func DetectMount() (string, error) {
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if err := unix.Statfs(m, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return m, nil
		}
	}
	return "", errors.New("no cgroup v2 mount at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}
