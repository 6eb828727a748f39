package capture

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/allox-os/allox/services/internal/effects/evidence"
	"github.com/allox-os/allox/services/internal/effects/scope"
)

// VolatileSysctls are the sysctl keys (an entry ending in "." is a prefix)
// that the kernel changes by itself, so that a difference in them says
// nothing about a run. They are excluded from every sysctl snapshot, and
// the snapshot lists them. Keep the list minimal: every entry is a blind
// spot.
var VolatileSysctls = []string{
	"fs.aio-nr",                         // in-flight AIO contexts
	"fs.binfmt_misc.",                   // an automount point: walking it would mount it
	"fs.dentry-state",                   // dcache counters
	"fs.file-nr",                        // open file handles
	"fs.inode-nr",                       // inode counters
	"fs.inode-state",                    // inode counters
	"fs.quota.",                         // quota operation counters
	"kernel.ns_last_pid",                // last pid allocated
	"kernel.perf_event_max_sample_rate", // lowered by the kernel when perf interrupts run long
	"kernel.pty.nr",                     // open ptys
	"kernel.random.",                    // entropy_avail, uuid (new on every read)
	"net.netfilter.nf_conntrack_count",  // tracked connections
}

func volatile(key string) bool {
	for _, v := range VolatileSysctls {
		if key == v || strings.HasSuffix(v, ".") && strings.HasPrefix(key, v) {
			return true
		}
	}
	return false
}

// Sysctls captures the keys under root (normally /proc/sys) that keys
// selects, except VolatileSysctls and write-only keys. A key whose read
// fails is recorded with its errno (e.g. net.ipv6.conf.all.stable_secret
// reads EIO until it is set).
func Sysctls(root string, keys *scope.Keys) *evidence.Snapshot {
	s := &evidence.Snapshot{Excluded: append([]string(nil), VolatileSysctls...)}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		key := strings.ReplaceAll(rel, "/", ".")
		if d.IsDir() {
			if rel != "." && volatile(key+".") {
				return fs.SkipDir
			}
			return nil
		}
		if volatile(key) || !keys.Match(key) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone while walking (e.g. a link's conf)
		}
		if info.Mode().Perm()&0o444 == 0 {
			return nil // write-only: flush, drop_caches, compact_memory
		}
		b, err := os.ReadFile(p)
		value := strings.Join(strings.Fields(string(b)), " ")
		var errno syscall.Errno
		switch {
		case errors.As(err, &errno):
			value = "read error: " + errno.Error()
		case err != nil:
			return err
		}
		s.Items = append(s.Items, evidence.Item{Key: key, Value: value})
		return nil
	})
	if err != nil {
		return unconfirmed("walk " + root + ": " + err.Error())
	}
	return s
}
