package tracked

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/allox-os/allox/internal/cgroup"
)

// cgroups creates and kills the per-agent/session/run groups under <mount>/<parent>; every
// operation on a group goes through package cgroup.
type cgroups struct {
	mount       string
	parent      string          // group path, e.g. "/allox"
	controllers map[string]bool // available in the parent
	limits      limitConfig
}

func newCgroups(cfg *Config) (*cgroups, error) {
	parent := "/" + cfg.CgroupParent
	g, err := cgroup.Create(cfg.CgroupMount, parent, cgroup.Limits{})
	if err != nil {
		return nil, fmt.Errorf("cgroup parent: %w", err)
	}
	avail, err := g.Controllers()
	if err != nil {
		return nil, fmt.Errorf("cgroup parent: %w", err)
	}
	c := &cgroups{mount: cfg.CgroupMount, parent: parent, controllers: map[string]bool{},
		limits: limitConfig{run: cfg.RunLimits, session: cfg.SessionLimits}}
	for _, name := range avail {
		c.controllers[name] = true
	}
	if err := c.reserve(g, cfg.RunsMemoryReserve); err != nil {
		return nil, err
	}
	return c, nil
}

// group returns the cgroup path (relative to the mount) for the given ids.
func (c *cgroups) group(ids ...string) string {
	return filepath.Join(append([]string{c.parent}, ids...)...)
}

func (c *cgroups) path(group string) string { return filepath.Join(c.mount, group) }

// load is the group at a path made by group (from validated ids).
func (c *cgroups) load(group string) (*cgroup.Group, error) { return cgroup.Load(c.mount, group) }

// create makes the run group — and its agent and session groups, with the controllers enabled down
// the tree and the session's limits — writes the run's limits and returns the group's directory
// opened for clone3(CLONE_INTO_CGROUP). The caller closes it.
func (c *cgroups) create(group string) (*os.File, error) {
	agent, session, ok := c.split(group)
	if !ok {
		return nil, fmt.Errorf("BUG: %s is not a run group below %s", group, c.parent)
	}
	sess, err := c.session(agent, session)
	if err != nil {
		return nil, err
	}
	if _, err := cgroup.Create(c.mount, c.group(agent, session), c.toLimits(sess)); err != nil {
		return nil, err
	}
	g, err := cgroup.Create(c.mount, group, c.runGroupLimits(c.runLimits(sess)))
	if err != nil {
		return nil, err
	}
	f, err := g.Open()
	if err != nil {
		_ = g.Delete()
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

// kill writes cgroup.kill: every process in the group and its descendants gets SIGKILL.
func (c *cgroups) kill(group string) error {
	g, err := c.load(group)
	if err != nil {
		return err
	}
	return g.Kill()
}

// populated reports whether any process is left in the group's subtree.
func (c *cgroups) populated(group string) bool {
	g, err := c.load(group)
	if err != nil {
		return false
	}
	p, _ := g.Populated()
	return p
}

// killWait kills the group and waits until it is empty or ctx is done.
func (c *cgroups) killWait(ctx context.Context, group string) error {
	g, err := c.load(group)
	if err != nil {
		return err
	}
	return g.KillWait(ctx)
}

// freeze freezes or thaws the group and waits until the kernel reports the new state (at once
// for an empty group), or ctx is done.
func (c *cgroups) freeze(ctx context.Context, group string, frozen bool) error {
	g, err := c.load(group)
	if err != nil {
		return err
	}
	return g.Freeze(ctx, frozen)
}

// remove deletes an empty group (ignoring a group that is already gone).
func (c *cgroups) remove(group string) error {
	g, err := c.load(group)
	if err != nil {
		return err
	}
	return g.Delete()
}

// removeTree kills every process in group and below it, waits until they are gone and removes
// the group and every group below it, deepest first. A group that does not exist is no error.
func (c *cgroups) removeTree(ctx context.Context, group string) error {
	g, err := c.load(group)
	if err != nil {
		return err
	}
	return g.DeleteTree(ctx)
}

// children lists the groups directly below group.
func (c *cgroups) children(group string) []string {
	g, err := c.load(group)
	if err != nil {
		return nil
	}
	names, _ := g.Children()
	var out []string
	for _, n := range names {
		if validID(n) {
			out = append(out, n)
		}
	}
	return out
}
