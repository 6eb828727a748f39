// Package system is the daemon's "system" domain: facts about the guest it runs in (kernel, image,
// workspace store, cgroup hierarchy, boot id), the running kernel's configuration, and powering the
// guest off. Paths under /proc, /sys and /etc and every kernel effect are fields, so tests point them
// at a temporary directory or a fake.
package system

import (
	"errors"
	"runtime/debug"

	"github.com/allox-os/allox/internal/manifest"
)

// ErrNoKernelConfig means the running kernel does not expose its configuration.
var ErrNoKernelConfig = errors.New("the running kernel does not expose its configuration: build it with CONFIG_IKCONFIG=y and CONFIG_IKCONFIG_PROC=y")

// ErrNotUnderInit means the daemon's parent is not PID 1, so signalling PID 1 would not power off
// the guest this daemon belongs to (it may be a developer's machine).
var ErrNotUnderInit = errors.New("the daemon is not a child of PID 1, so PID 1 is not the guest's init: refusing to power it off; run the daemon under the Allox init")

// System reads the guest's state and powers it off.
type System struct {
	// Root is the workspace store, the daemon's --root.
	Root string
	// ProcDir, SysDir and ManifestPath are "/proc", "/sys" and manifest.Path outside tests.
	ProcDir      string
	SysDir       string
	ManifestPath string
	// Version is the daemon's version.
	Version string
	// Sandbox is reported as it is by Info; the daemon sets it once its runs' boundary is up.
	Sandbox Sandbox
	// Quarantined, when set (the daemon sets it once the store is open), lists the sessions the
	// store quarantined, for Info.
	Quarantined func() []Quarantined

	// Kernel effects and queries.
	Uname    func() (Kernel, error)
	Statfs   func(path string) (magic uint32, err error)
	Getppid  func() int
	PowerOff func() error
}

// New returns a System for the real guest, with the workspace store at root.
func New(root, version string) *System {
	return &System{
		Root:         root,
		ProcDir:      "/proc",
		SysDir:       "/sys",
		ManifestPath: manifest.Path,
		Version:      version,
		Uname:        uname,
		Statfs:       statfs,
		Getppid:      getppid,
		PowerOff:     signalInit,
	}
}

// BuildVersion is the daemon's version: set (for example by -ldflags -X) when not empty, otherwise
// the module version recorded in the binary, otherwise "devel".
func BuildVersion(set string) string {
	if set != "" {
		return set
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
