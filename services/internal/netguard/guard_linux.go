package netguard

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Guard is a guard loaded and attached by this process. Its programs stay
// attached to the cgroup after Close; only [Detach] or a later [Attach]
// removes them.
type Guard struct {
	dir   string
	ports []uint16
	objs  netguardObjects
}

// hook is one of the six attach points, with the name of its program as the
// kernel reports it (the C function name, at most 15 bytes).
type hook struct {
	attach ebpf.AttachType
	name   string
	prog   func(*netguardPrograms) *ebpf.Program
}

// hooks in attach order: bind first, so that squatting is closed first.
var hooks = []hook{
	{ebpf.AttachCGroupInet4Bind, netguardProgNgBind4, func(p *netguardPrograms) *ebpf.Program { return p.NgBind4 }},
	{ebpf.AttachCGroupInet6Bind, netguardProgNgBind6, func(p *netguardPrograms) *ebpf.Program { return p.NgBind6 }},
	{ebpf.AttachCGroupInet4Connect, netguardProgNgConnect4, func(p *netguardPrograms) *ebpf.Program { return p.NgConnect4 }},
	{ebpf.AttachCGroupInet6Connect, netguardProgNgConnect6, func(p *netguardPrograms) *ebpf.Program { return p.NgConnect6 }},
	{ebpf.AttachCGroupUDP4Sendmsg, netguardProgNgSendmsg4, func(p *netguardPrograms) *ebpf.Program { return p.NgSendmsg4 }},
	{ebpf.AttachCGroupUDP6Sendmsg, netguardProgNgSendmsg6, func(p *netguardPrograms) *ebpf.Program { return p.NgSendmsg6 }},
}

// Attach loads the guard with the given protected ports and attaches it to
// cgroupDir (replacing an earlier guard there). The guard stays attached
// after Close.
//
// Should an attachment fail, the hooks attached before it already hold the
// new programs and the others keep what they held: the cgroup is never left
// with fewer hooks than before.
func Attach(cgroupDir string, ports []uint16) (*Guard, error) {
	set, err := portSet(ports)
	if err != nil {
		return nil, fmt.Errorf("attach to %s: %w", cgroupDir, err)
	}
	dir, err := openCgroup(cgroupDir)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	defer dir.Close()

	g := &Guard{dir: cgroupDir, ports: set}
	if err := g.load(); err != nil {
		return nil, err
	}
	for _, h := range hooks {
		err := link.RawAttachProgram(link.RawAttachProgramOptions{
			Target:  int(dir.Fd()),
			Program: h.prog(&g.objs.netguardPrograms),
			Attach:  h.attach,
			Flags:   0, // replaces this hook's program; no programs below
		})
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("attach %s to %s: %w", h.name, cgroupDir, attachError(err))
		}
	}
	return g, nil
}

// load loads the programs and the frozen protected-port bitmap.
func (g *Guard) load() error {
	if err := features.HaveProgramType(ebpf.CGroupSockAddr); err != nil {
		return fmt.Errorf("%w (%w)", ErrNoCgroupBPF, err)
	}
	spec, err := loadNetguard()
	if err != nil {
		return fmt.Errorf("load netguard: %w", err)
	}
	m := spec.Maps[netguardMapProtectedPorts]
	for i, w := range bitmap(g.ports) {
		if w != 0 {
			m.Contents = append(m.Contents, ebpf.MapKV{Key: uint32(i), Value: w})
		}
	}
	if err := spec.LoadAndAssign(&g.objs, nil); err != nil {
		return fmt.Errorf("load netguard: %w", err)
	}
	// Programs can only read the map (BPF_F_RDONLY_PROG); frozen, nothing
	// can change it: another port set takes another Attach.
	if err := g.objs.ProtectedPorts.Freeze(); err != nil {
		g.objs.Close()
		return fmt.Errorf("freeze protected ports: %w", err)
	}
	return nil
}

// attachError explains the errors BPF_PROG_ATTACH gives for a cgroup.
func attachError(err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: the cgroup or one of its ancestors holds programs attached with other flags (a bpf_link, BPF_F_ALLOW_MULTI or a non-overridable program)", err)
	}
	return err
}

// Ports returns the protected ports, sorted.
func (g *Guard) Ports() []uint16 { return slices.Clone(g.ports) }

// Close releases this process's descriptors of the guard's programs and map.
// The programs stay attached and in force.
func (g *Guard) Close() error {
	if err := g.objs.Close(); err != nil {
		return fmt.Errorf("close guard of %s: %w", g.dir, err)
	}
	return nil
}

// Detach removes the guard's programs from cgroupDir. Programs of the same
// attach types that are not the guard's are left in place. Detaching a
// cgroup that holds no guard succeeds.
func Detach(cgroupDir string) error {
	dir, err := openCgroup(cgroupDir)
	if err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	defer dir.Close()
	var errs []error
	for _, h := range hooks {
		if err := detachHook(int(dir.Fd()), h); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detach from %s: %w", cgroupDir, err)
	}
	return nil
}

// detachHook detaches the programs named h.name attached to the cgroup at
// the hook h.
func detachHook(cgroup int, h hook) error {
	res, err := link.QueryPrograms(link.QueryOptions{Target: cgroup, Attach: h.attach})
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	for _, ap := range res.Programs {
		p, err := ebpf.NewProgramFromID(ap.ID)
		if errors.Is(err, os.ErrNotExist) {
			continue // detached and freed since the query
		}
		if err != nil {
			return fmt.Errorf("open program %d: %w", ap.ID, err)
		}
		info, err := p.Info()
		if err == nil && info.Name == h.name {
			err = link.RawDetachProgram(link.RawDetachProgramOptions{Target: cgroup, Program: p, Attach: h.attach})
			if errors.Is(err, unix.ENOENT) {
				err = nil // detached by someone else since the query
			}
		}
		p.Close()
		if err != nil {
			return fmt.Errorf("program %d: %w", ap.ID, err)
		}
	}
	return nil
}

// openCgroup opens a cgroup v2 directory.
func openCgroup(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		f.Close()
		return nil, fmt.Errorf("%s is not a cgroup v2 directory: give one below the cgroup2 mount, e.g. /sys/fs/cgroup/allox", path)
	}
	return f, nil
}
