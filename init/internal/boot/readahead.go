package boot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/allox-os/allox/internal/manifest"
	"golang.org/x/sys/unix"
)

// Readahead asks the kernel to read files into the page cache now (POSIX_FADV_WILLNEED), without
// waiting for the reads. Init gives it the services' executables first thing after the manifest:
// the reads of the read-only image run while the network, the cgroups and the store are set up,
// and a service's exec then faults its pages in from memory instead of waiting, fault after
// fault, on the virtio disk.
//
// One advice covers at most the device's readahead window or its largest request from the
// offset it names (the kernel's force_page_cache_ra caps it at max(io_pages, ra_pages)), so
// only the start of a large executable arrives ahead (7.7 of 32 MiB on this host's virtio disk).
// Advising the whole file a window at a time was measured and dropped: in the guest, the 11 MiB
// daemon's exec to its main went from about 200 to 150 ms (2 and 3 instrumented boots), but the
// boot got no faster (10 formatted Kata boots of each: init's first step to ready 448 ms before,
// 463 ms after), because the guest's one CPU fills the page cache either way.
type Readahead struct{ Paths []string }

func (r Readahead) String() string { return "readahead " + strings.Join(r.Paths, " ") }

// Run advises every path it can open; a file that is missing or refuses the advice is named in
// the error (the step is optional: the service's own start reports a missing executable).
func (r Readahead) Run(_ context.Context, sys *Sys) error {
	var errs []error
	for _, p := range r.Paths {
		f, err := os.Open(sys.Path(p))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED); err != nil {
			errs = append(errs, fmt.Errorf("readahead %s: %w", p, err))
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// Executables are the absolute paths of the services' commands and of the kata-agent, each once,
// in start order.
func Executables(m *manifest.Manifest) []string {
	var out []string
	add := func(p string) {
		if path.IsAbs(p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if m.KataAgent != nil {
		add(m.KataAgent.Path)
	}
	for _, s := range m.Services {
		if len(s.Command) > 0 {
			add(s.Command[0])
		}
	}
	return out
}
