package boot

import (
	"context"
	"fmt"
	"os"
	"path"
	"strconv"

	"github.com/allox-os/allox/internal/manifest"
)

// ServiceCgroupDir holds one cgroup per supervised service, so that the control plane (the
// workspace daemon, the kata-agent) is not in the root cgroup with everything else and its
// memory.min and memory.low protect it from the runs, which live in a sibling subtree.
const ServiceCgroupDir = "/sys/fs/cgroup/system"

// ServiceGroups is the table that makes the services' cgroups: the parent with the controllers
// enabled below it, one group per service with its memory.min and memory.low, and on the parent
// their sums (a child's protection is bounded by its parent's). Every step is optional: a service
// whose group is missing runs in init's cgroup, and init warns.
func ServiceGroups(services []manifest.Service) []Step {
	steps := []Step{Opt{Dir{ServiceCgroupDir, 0o755}}, Opt{Controllers{ServiceCgroupDir}}}
	var min, low int64
	var groups []Step
	for _, s := range services {
		dir := path.Join(ServiceCgroupDir, s.Name)
		groups = append(groups, Opt{Dir{dir, 0o755}})
		if s.MemoryMin > 0 {
			groups = append(groups, Opt{CgroupSet{dir, "memory.min", s.MemoryMin}})
			min += s.MemoryMin
		}
		if s.MemoryLow > 0 {
			groups = append(groups, Opt{CgroupSet{dir, "memory.low", s.MemoryLow}})
			low += s.MemoryLow
		}
	}
	if min > 0 {
		steps = append(steps, Opt{CgroupSet{ServiceCgroupDir, "memory.min", min}})
	}
	if low > 0 {
		steps = append(steps, Opt{CgroupSet{ServiceCgroupDir, "memory.low", low}})
	}
	return append(steps, groups...)
}

// CgroupSet writes one value into a cgroup's interface file.
type CgroupSet struct {
	Dir   string
	File  string
	Value int64
}

func (c CgroupSet) String() string {
	return fmt.Sprintf("echo %d > %s", c.Value, path.Join(c.Dir, c.File))
}

// Run writes the value; the file must exist (cgroupfs creates no files).
func (c CgroupSet) Run(_ context.Context, sys *Sys) error {
	f, err := os.OpenFile(sys.Path(path.Join(c.Dir, c.File)), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(strconv.FormatInt(c.Value, 10))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}
