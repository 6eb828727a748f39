// Package build is mkimage's pipeline: from a validated spec to the artifacts in the output
// directory, one timed stage at a time. Expensive deterministic work (the kernel, the Debian userland)
// comes from content-hashed caches outside the checkout.
package build

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/kernel"
	"github.com/allox-os/allox/mkimage/internal/spec"
	"github.com/allox-os/allox/rootfs"
)

// Options configure one build.
type Options struct {
	Spec       *spec.Image
	SpecText   []byte // the spec's bytes, hashed into the provenance manifest and the filesystem ids
	ModuleRoot string // the Allox checkout the Go binaries are built from
	CacheDir   string
	Epoch      int64 // SOURCE_DATE_EPOCH: every timestamp in the artifacts
	Jobs       int   // kernel build parallelism; 0 = all CPUs
	Progress   io.Writer
}

// Result summarises a build.
type Result struct {
	OutDir       string
	Kernel       *kernel.Result
	Provenance   *Provenance
	StageSeconds map[string]float64
	// Stages says, per stage, whether it did its work or reused what an earlier build made, and why.
	Stages map[string]StageReport
}

// StageReport is what one stage did: Ran is false when it reused an earlier build's work.
type StageReport struct {
	Ran bool
	Why string
}

// state is what the stages hand each other.
type state struct {
	opt      Options
	out      string // output directory
	work     string // scratch space, removed at the end
	kernel   *kernel.Result
	bins     []rootfs.Binary
	agent    *rootfs.Binary  // the kata-agent, when the spec brings one
	npm      []rootfs.Binary // the files of the spec's npm packages (not Go binaries)
	files    []rootfs.File   // data files for the image (plugin hash pins)
	userland string
	packages []rootfs.Package
	tree     *initramfs.Tree
	memMiB   int // guest memory for initrd mode, from the staged tree
	prov     *Provenance
	verity   *rootfs.VerityParams // the rootfs hash tree, when the spec asks for dm-verity

	prev     *buildState // what the last build in this output directory recorded
	next     *buildState // what this build records
	hashes   *hashes     // stat-keyed sha256 of every file hashed, carried over between builds
	treeKey  map[string]string
	initrd   *initramfsJob // the initramfs being written beside the disk
	report   StageReport   // the running stage's
	reported bool
}

// newState starts a build into out, with what the last build there recorded.
func newState(opt Options, out, work string) *state {
	prev := loadState(out)
	s := &state{opt: opt, out: out, work: work, prov: newProvenance(opt), prev: prev,
		next: &buildState{Version: stateVersion, Tools: map[string]toolStamp{}}, hashes: newHashes(prev.Files)}
	s.prov.sum = s.hash
	return s
}

// ran records that the running stage did its work, and why; reused that it did not.
func (s *state) ran(format string, args ...any) { s.setReport(true, format, args...) }

func (s *state) reused(format string, args ...any) { s.setReport(false, format, args...) }

func (s *state) setReport(ran bool, format string, args ...any) {
	why := fmt.Sprintf(format, args...)
	if s.reported && s.report.Ran && !ran { // a stage that ran in part ran
		return
	}
	if s.reported && s.report.Ran == ran && s.report.Why != "" {
		why = s.report.Why + "; " + why
	}
	s.report, s.reported = StageReport{Ran: ran, Why: why}, true
}

// hash is the sha256 of a file, from the stat-keyed cache when it did not change.
func (s *state) hash(p string) (string, error) { return s.hashes.sum(p) }

type stage struct {
	name string
	run  func(ctx context.Context, s *state) error
}

var stages = []stage{
	{"kernel", buildKernel},
	{"go binaries", buildBinaries},
	{"kata agent", bringAgent},
	{"debian userland", fetchUserland},
	{"npm packages", fetchNpm},
	{"stage rootfs", stageRootfs},
	{"rootfs disk image", writeDisk},
	{"nvdimm dax header", writeDAXHeader},
	{"initramfs", writeInitramfs},
	{"kata drop-ins", writeKata},
	{"boot info", writeBootInfo},
	{"kata contract check", checkKataContract},
	{"provenance manifest", writeProvenance},
}

// Run executes every stage in order, printing each with its time.
func Run(ctx context.Context, opt Options) (*Result, error) {
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	out := opt.Spec.Output.Dir
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	work, err := os.MkdirTemp(out, ".work-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	s := newState(opt, out, work)
	res := &Result{OutDir: out, StageSeconds: map[string]float64{}, Stages: map[string]StageReport{}}
	total := time.Now()
	var ran, reused int
	for i, st := range stages {
		start := time.Now()
		fmt.Fprintf(opt.Progress, "==> [%d/%d] %s\n", i+1, len(stages), st.name)
		s.report, s.reported = StageReport{Ran: true}, false
		if err := st.run(ctx, s); err != nil {
			s.waitInitramfs()
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		d := time.Since(start)
		res.StageSeconds[st.name] = d.Seconds()
		res.Stages[st.name] = s.report
		verb := "ran"
		if s.report.Ran {
			ran++
		} else {
			verb = "reused"
			reused++
		}
		if s.report.Why != "" {
			verb += ": " + s.report.Why
		}
		fmt.Fprintf(opt.Progress, "    %s in %s, %s\n", st.name, d.Round(10*time.Millisecond), verb)
	}
	s.next.Files = s.hashes.live()
	if err := saveState(out, s.next); err != nil {
		return nil, err
	}
	fmt.Fprintf(opt.Progress, "==> built %s %s into %s in %s (%d stages ran, %d reused)\n", opt.Spec.Name, opt.Spec.Version, out,
		time.Since(total).Round(10*time.Millisecond), ran, reused)
	res.Kernel, res.Provenance = s.kernel, s.prov
	return res, nil
}

// place moves a finished file from the scratch directory into the output directory atomically.
func (s *state) place(tmp, name string) error {
	return os.Rename(tmp, filepath.Join(s.out, name))
}
