package tracked

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// cgroups creates and kills the per-agent/session/run groups under
// <mount>/<parent>.
type cgroups struct {
	mount       string
	parent      string          // group path, e.g. "/allox"
	controllers map[string]bool // available in the parent
	limits      limitConfig
}

func newCgroups(cfg *Config) (*cgroups, error) {
	parent := "/" + cfg.CgroupParent
	if _, err := cgroup2.NewManager(cfg.CgroupMount, parent, &cgroup2.Resources{}); err != nil {
		return nil, fmt.Errorf("cgroup parent %s: %w", filepath.Join(cfg.CgroupMount, parent), err)
	}
	avail, err := os.ReadFile(filepath.Join(cfg.CgroupMount, parent, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup parent: %w", err)
	}
	c := &cgroups{mount: cfg.CgroupMount, parent: parent, controllers: map[string]bool{},
		limits: limitConfig{run: cfg.RunLimits, session: cfg.SessionLimits}}
	for _, name := range strings.Fields(string(avail)) {
		c.controllers[name] = true
	}
	if err := c.reserve(cfg.RunsMemoryReserve); err != nil {
		return nil, err
	}
	return c, nil
}

// group returns the cgroup path (relative to the mount) for the given ids.
func (c *cgroups) group(ids ...string) string {
	return filepath.Join(append([]string{c.parent}, ids...)...)
}

func (c *cgroups) path(group string) string { return filepath.Join(c.mount, group) }

// create makes the run group — and its agent and session groups, with the controllers enabled down
// the tree and the session's limits — writes the run's limits and returns an O_PATH directory fd
// for clone3(CLONE_INTO_CGROUP). The caller closes it.
func (c *cgroups) create(group string) (*os.File, error) {
	agent, session, ok := c.split(group)
	if !ok {
		return nil, fmt.Errorf("BUG: %s is not a run group below %s", group, c.parent)
	}
	sess, err := c.session(agent, session)
	if err != nil {
		return nil, err
	}
	if err := c.setup(group, sess, c.runLimits(sess)); err != nil {
		_ = os.Remove(c.path(group))
		return nil, err
	}
	f, err := os.Open(c.path(group))
	if err != nil {
		_ = os.Remove(c.path(group))
		return nil, err
	}
	return f, nil
}

// split returns the agent and session of a run group <parent>/<agent>/<session>/<run>.
func (c *cgroups) split(group string) (agent, session string, ok bool) {
	rel, ok := strings.CutPrefix(group, c.parent+"/")
	parts := strings.Split(rel, "/")
	if !ok || len(parts) != 3 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// kill writes cgroup.kill: every process in the group and its descendants
// gets SIGKILL.
func (c *cgroups) kill(group string) error {
	err := os.WriteFile(filepath.Join(c.path(group), "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// populated reports whether any process is left in the group's subtree.
func (c *cgroups) populated(group string) bool {
	b, err := os.ReadFile(filepath.Join(c.path(group), "cgroup.events"))
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "populated 1")
}

// killWait kills the group and waits until it is empty or ctx is done.
func (c *cgroups) killWait(ctx context.Context, group string) error {
	if err := c.kill(group); err != nil {
		return fmt.Errorf("cgroup.kill %s: %w", group, err)
	}
	for c.populated(group) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup %s not empty: %w", group, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// freeze sets cgroup.freeze and waits until cgroup.events reports the new state (at once for an
// empty group), or ctx is done. It polls, from 20 µs up to 100 µs between reads: the state changes
// within microseconds for a group whose tasks sleep (bwrap on its block fd), and the file's change
// notification is rate-limited by the kernel to one per 10 ms, too slow for a run's start.
func (c *cgroups) freeze(ctx context.Context, group string, frozen bool) error {
	v, want := "0", "frozen 0"
	if frozen {
		v, want = "1", "frozen 1"
	}
	if err := os.WriteFile(filepath.Join(c.path(group), "cgroup.freeze"), []byte(v), 0); err != nil {
		return fmt.Errorf("cgroup.freeze %s: %w", group, err)
	}
	pause := 20 * time.Microsecond
	for {
		b, err := os.ReadFile(filepath.Join(c.path(group), "cgroup.events"))
		if err != nil {
			return fmt.Errorf("cgroup.events %s: %w", group, err)
		}
		if strings.Contains(string(b), want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup %s: %q not reached: %w", group, want, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Microsecond)
	}
}

// remove deletes an empty group (ignoring a group that is already gone).
func (c *cgroups) remove(group string) error {
	err := os.Remove(c.path(group))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// removeTree kills every process in group and below it, waits until they are gone and removes
// the group and every group below it, deepest first. A group that does not exist is no error.
func (c *cgroups) removeTree(ctx context.Context, group string) error {
	if _, err := os.Stat(c.path(group)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := c.killWait(ctx, group); err != nil {
		return err
	}
	return c.removeEmpty(group)
}

func (c *cgroups) removeEmpty(group string) error {
	ents, err := os.ReadDir(c.path(group))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, c.removeEmpty(filepath.Join(group, e.Name())))
		}
	}
	return errors.Join(append(errs, c.remove(group))...)
}

// children lists the groups directly below group.
func (c *cgroups) children(group string) []string {
	ents, _ := os.ReadDir(c.path(group))
	var out []string
	for _, e := range ents {
		if e.IsDir() && validID(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}
