// Package boot is the table of small steps that the Go PID 1 runs before it starts services: API
// filesystems, cgroups, hostname, network, fw_cfg blobs, the manifest and the Btrfs workspace store.
//
// Every step reaches the kernel through the function fields of Sys and resolves its paths against
// Sys.Root, so the table runs unprivileged in a unit test against a directory and fake effects.
package boot

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"time"
)

// Step is one boot action. Its String is the line init logs before running it.
type Step interface {
	fmt.Stringer
	Run(ctx context.Context, sys *Sys) error
}

// Opt marks a step as optional: its failure is a warning and boot goes on.
type Opt struct{ Step }

// Required reports whether a failure of s stops the boot.
func Required(s Step) bool {
	_, opt := s.(Opt)
	return !opt
}

// ErrSkipped is wrapped by a step that had nothing to do (for example a missing fw_cfg blob).
var ErrSkipped = errors.New("skipped")

// StepError is a required step that failed; init prints it after marker.StepFailed and powers off.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// Notice is something a step wants the console to show that is not an error, such as the RAM
// fallback of the store. Marker, when set, is printed as a console line of its own.
type Notice struct {
	Marker  string
	Message string
	Attrs   []any
}

// Sys is what steps may touch: a root directory and the kernel, through function fields.
type Sys struct {
	// Root is prefixed to every path a step opens: "/" at boot, a temporary directory in tests.
	Root string

	Mount        func(source, target, fstype string, flags uintptr, data string) error
	Sethostname  func(name string) error
	LinkUp       func(name string) error
	AddrAdd      func(name string, addr netip.Prefix) error
	DefaultRoute func(name string, gateway netip.Addr) error
	// Mkfs creates a Btrfs filesystem on dev; mixed selects mixed block groups for small devices.
	Mkfs func(ctx context.Context, dev, label string, mixed bool) error
	// Loop attaches file to a free loop device. release drops init's hold on the device: after a
	// mount the device then goes away with the unmount, without a mount it goes away at once.
	Loop func(file string) (dev string, release func() error, err error)
	// Notify shows a Notice on the console; nil drops notices.
	Notify func(Notice)
	// LeaveRootfs makes the root directory a mount of its own when it is the kernel's initial
	// rootfs (initrd mode), reporting false when it is not; nil does nothing.
	LeaveRootfs func() (bool, error)

	// StoreWait is how long the store step looks for its disk before it falls back to RAM.
	StoreWait time.Duration

	mu     sync.Mutex // the store's steps run beside others
	mounts []string
}

// Path resolves an absolute path of the booted system against Root.
func (s *Sys) Path(p string) string { return filepath.Join(s.Root, p) }

// Mounts returns the mount points made so far (Root-resolved), in mount order.
func (s *Sys) Mounts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.mounts...)
}

func (s *Sys) mounted(target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mounts = append(s.mounts, target)
}

func (s *Sys) notify(n Notice) {
	if s.Notify != nil {
		s.Notify(n)
	}
}

// Result is what Run reports for each step.
type Result struct {
	Step     Step
	Required bool
	Done     bool // false when the step is about to run, true once it has run
	Took     time.Duration
	Err      error // nil on success; wraps ErrSkipped when the step had nothing to do
}

// Run runs steps in order, reporting each one before and after it runs (report may be nil). The
// first failing required step stops the run and comes back as a *StepError; optional failures
// are only reported. Run stops early, with ctx's error, when ctx is done.
func Run(ctx context.Context, sys *Sys, steps []Step, report func(Result)) error {
	if report == nil {
		report = func(Result) {}
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		report(Result{Step: s, Required: Required(s)})
		start := time.Now()
		err := s.Run(ctx, sys)
		report(Result{Step: s, Required: Required(s), Done: true, Took: time.Since(start), Err: err})
		if err != nil && Required(s) && !errors.Is(err, ErrSkipped) {
			return &StepError{Step: s.String(), Err: err}
		}
	}
	return nil
}
