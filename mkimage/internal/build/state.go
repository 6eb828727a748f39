package build

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/rootfs"
)

// StateName is the build's memory in the output directory (hidden, so no artifact): what each
// stage was keyed by the last time it ran, and the sha256 of every file the build hashed, keyed by
// the file's stat, so that a no-op rebuild re-hashes nothing and rewrites nothing.
const StateName = ".mkimage-state.json"

// stateVersion changes when the state's meaning changes; a state of another version is ignored.
const stateVersion = 1

// buildState is StateName's content.
type buildState struct {
	Version       int                  `json:"version"`
	Files         map[string]fileStamp `json:"files"`   // absolute path → stamp and sha256
	Tree          *treeRecord          `json:"tree"`    // the staged tree the disk and the initramfs were written from
	Checked       string               `json:"checked"` // the outputs' digest the Kata contract check last passed on
	CheckWarnings string               `json:"check_warnings"`
	Tools         map[string]toolStamp `json:"tools"` // tool path → its version, keyed by the tool's stamp
	// Binaries are the Go binaries by their path in the image.
	Binaries map[string]binRecord `json:"binaries"`
}

// treeRecord is what the disk and initramfs stages produced from the tree with inputs Inputs.
type treeRecord struct {
	Inputs    map[string]string    `json:"inputs"` // component → digest (see treeInputs)
	Disk      string               `json:"disk"`   // digest of the tree inputs the disk was written from
	Initramfs string               `json:"initramfs"`
	MemoryMiB int                  `json:"memory_mib"`
	Verity    *rootfs.VerityParams `json:"verity,omitempty"`
}

// fileStamp identifies one version of a file: the kernel changes ctime on every write, rename
// and link count change, and no one can set it. A file with other hard links (the kernel's
// artifacts, linked from the cache into every output directory) is stamped without its ctime,
// which every link made or removed elsewhere moves.
type fileStamp struct {
	Dev, Ino, Size, MtimeNs, CtimeNs int64
	SHA256                           string `json:",omitempty"`
}

type toolStamp struct {
	Stamp   fileStamp `json:"stamp"`
	Version string    `json:"version"`
}

func stampOf(p string) (fileStamp, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return fileStamp{}, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	fs := fileStamp{Dev: int64(st.Dev), Ino: int64(st.Ino), Size: st.Size, MtimeNs: st.Mtim.Nano()}
	if st.Nlink == 1 {
		fs.CtimeNs = st.Ctim.Nano()
	}
	return fs, nil
}

func (a fileStamp) same(b fileStamp) bool {
	a.SHA256, b.SHA256 = "", ""
	return a == b
}

// hashes is the stat-keyed sha256 cache, safe for concurrent use.
type hashes struct {
	mu    sync.Mutex
	files map[string]fileStamp
	used  map[string]fileStamp // what this build hashed or checked: the next build's cache
}

func newHashes(prev map[string]fileStamp) *hashes {
	return &hashes{files: prev, used: map[string]fileStamp{}}
}

// live is the cache the next build starts from: the files this build used.
func (h *hashes) live() map[string]fileStamp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.used
}

// sum returns the sha256 of p, hashing it only when its stamp differs from the one recorded.
func (h *hashes) sum(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	st, err := stampOf(p)
	if err != nil {
		return "", err
	}
	h.mu.Lock()
	old, ok := h.files[p]
	h.mu.Unlock()
	if ok && old.same(st) && old.SHA256 != "" {
		h.record(p, old, old.SHA256)
		return old.SHA256, nil
	}
	sum, err := artifact.SHA256File(p)
	if err != nil {
		return "", err
	}
	h.record(p, st, sum)
	return sum, nil
}

// known records the sha256 of a file the build just wrote (and hashed while writing).
func (h *hashes) known(p, sum string) error {
	p, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	st, err := stampOf(p)
	if err != nil {
		return err
	}
	h.record(p, st, sum)
	return nil
}

func (h *hashes) record(p string, st fileStamp, sum string) {
	st.SHA256 = sum
	h.mu.Lock()
	h.files[p], h.used[p] = st, st
	h.mu.Unlock()
}

// unchanged reports whether p still has the stamp recorded for it.
func (h *hashes) unchanged(p string) bool {
	p, err := filepath.Abs(p)
	if err != nil {
		return false
	}
	st, err := stampOf(p)
	h.mu.Lock()
	defer h.mu.Unlock()
	old, ok := h.files[p]
	if err != nil || !ok || !old.same(st) {
		return false
	}
	h.used[p] = old
	return true
}

func loadState(out string) *buildState {
	st := &buildState{}
	data, err := os.ReadFile(filepath.Join(out, StateName))
	if err == nil {
		err = json.Unmarshal(data, st)
	}
	if err != nil || st.Version != stateVersion {
		st = &buildState{}
	}
	st.Version = stateVersion
	if st.Files == nil {
		st.Files = map[string]fileStamp{}
	}
	if st.Tools == nil {
		st.Tools = map[string]toolStamp{}
	}
	return st
}

// saveState writes the state atomically; only a build that finished writes it, so a failed build's
// half-written outputs never look up to date.
func saveState(out string, st *buildState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(out, StateName+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("build state: %w", err)
	}
	return os.Rename(tmp, filepath.Join(out, StateName))
}
