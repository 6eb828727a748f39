package system

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/allox-os/allox/internal/manifest"
)

// Info is what system.info reports.
type Info struct {
	Version string
	Image   *manifest.Image // nil when the guest has no manifest
	Kernel  Kernel
	Store   Store
	Cgroup  Cgroup
	BootID  string
	Self    Self
	Tasks   int
	Sandbox Sandbox
	// Quarantined are the sessions the workspace store quarantined (none with --system-only).
	Quarantined []Quarantined
}

// Quarantined is a session whose journaled recovery the store could not finish.
type Quarantined struct {
	AgentID, SessionID string
	Reason             string
	Since              time.Time
}

// SeccompRule is one row of the runs' seccomp filter: a call (its x86_64 number), the condition
// on its arguments under which it is refused, and the errno it then fails with.
type SeccompRule struct {
	Syscall string
	Number  int
	When    string
	Args    []SeccompArg // all must hold; none: every call
	Errno   string
}

// SeccompArg is one condition on a call's argument: Op is "eq32" (its low 32 bits equal
// Value), "any_bit" (it has a bit of Value set) or "ne" (it differs from Value).
type SeccompArg struct {
	Index int
	Op    string
	Value uint64
}

// Sandbox is the boundary of the daemon's runs, as the daemon set it up (zero with --system-only).
type Sandbox struct {
	RunUID, RunGID   uint32        // the runs' unprivileged identity
	Seccomp          []SeccompRule // what the runs' seccomp filter refuses
	GuardedPorts     []uint16      // TCP/UDP ports no run may connect to, send to or bind, on any address
	ManagedExecution bool          // process.start may run managed: unsandboxed, as root (the VM is the only boundary)
}

// Kernel is the running kernel as uname(2) reports it.
type Kernel struct {
	Release, Version, Machine string
}

// Store describes the workspace store.
type Store struct {
	Root   string
	FSType string // see FSTypeName
}

// Cgroup describes the hierarchy at /sys/fs/cgroup. Version is 2 for cgroup2, else 0.
type Cgroup struct {
	Version                     int
	Controllers, SubtreeControl []string
}

// Info collects the guest's facts.
func (s *System) Info() (*Info, error) {
	k, err := s.Uname()
	if err != nil {
		return nil, fmt.Errorf("uname: %w", err)
	}
	magic, err := s.Statfs(s.Root)
	if err != nil {
		return nil, fmt.Errorf("statfs store %s: %w", s.Root, err)
	}
	img, err := s.image()
	if err != nil {
		return nil, err
	}
	cg, err := s.cgroup()
	if err != nil {
		return nil, err
	}
	bootID, err := os.ReadFile(filepath.Join(s.ProcDir, "sys/kernel/random/boot_id"))
	if err != nil {
		return nil, fmt.Errorf("boot id: %w", err)
	}
	var quarantined []Quarantined
	if s.Quarantined != nil {
		quarantined = s.Quarantined()
	}
	return &Info{
		Quarantined: quarantined,
		Version:     s.Version,
		Image:       img,
		Kernel:      k,
		Store:       Store{Root: s.Root, FSType: FSTypeName(magic)},
		Cgroup:      cg,
		BootID:      strings.TrimSpace(string(bootID)),
		Self:        s.self(),
		Tasks:       s.tasks(),
		Sandbox:     s.Sandbox,
	}, nil
}

func (s *System) image() (*manifest.Image, error) {
	f, err := os.Open(s.ManifestPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image manifest: %w", err)
	}
	defer f.Close()
	m, err := manifest.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("image manifest %s: %w", s.ManifestPath, err)
	}
	return &m.Image, nil
}

func (s *System) cgroup() (Cgroup, error) {
	cg := Cgroup{Controllers: []string{}, SubtreeControl: []string{}}
	dir := filepath.Join(s.SysDir, "fs/cgroup")
	magic, err := s.Statfs(dir)
	if errors.Is(err, fs.ErrNotExist) || err == nil && magic != cgroup2Magic {
		return cg, nil
	}
	if err != nil {
		return cg, fmt.Errorf("statfs %s: %w", dir, err)
	}
	cg.Version = 2
	for _, f := range []struct {
		name string
		dst  *[]string
	}{{"cgroup.controllers", &cg.Controllers}, {"cgroup.subtree_control", &cg.SubtreeControl}} {
		words, err := readWords(filepath.Join(dir, f.name))
		if err != nil {
			return cg, err
		}
		*f.dst = words
	}
	return cg, nil
}

// readWords returns the whitespace-separated words of a small file, in order.
func readWords(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	sc.Split(bufio.ScanWords)
	words := []string{}
	for sc.Scan() {
		words = append(words, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return words, nil
}
