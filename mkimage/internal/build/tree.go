package build

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
)

// keyTree computes what the staged tree, and so the disk and the initramfs, are made from: mkimage
// itself (its writers), the spec, SOURCE_DATE_EPOCH, the userland, every binary and every file laid
// over it, each by its sha256.
func (s *state) keyTree() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find mkimage's own executable: %w", err)
	}
	key := map[string]string{"spec": sha256Hex(s.opt.SpecText), "epoch": strconv.FormatInt(s.opt.Epoch, 10)}
	if key["mkimage"], err = s.hash(exe); err != nil {
		return err
	}
	if key["userland"], err = s.hash(s.userland); err != nil {
		return err
	}
	bins := append(slices.Clone(s.bins), s.npm...)
	if s.agent != nil {
		bins = append(bins, *s.agent)
	}
	for _, b := range bins {
		if key["binary "+b.Path], err = s.hash(b.Source); err != nil {
			return err
		}
	}
	for _, f := range s.files {
		key["file "+f.Path] = sha256Hex(f.Data)
	}
	s.treeKey = key
	return nil
}

func sha256Hex(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// treeDigest is one digest of all the tree's inputs.
func treeDigest(key map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(key)) {
		fmt.Fprintf(h, "%s %s\n", k, key[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (st *buildState) treeDisk() string {
	if st.Tree == nil {
		return ""
	}
	return st.Tree.Disk
}

func (st *buildState) treeInitramfs() string {
	if st.Tree == nil {
		return ""
	}
	return st.Tree.Initramfs
}

// needDisk reports whether rootfs.img must be written: the last one was written from other inputs,
// or it changed since (its stamp is not the one recorded when it was finished).
func (s *state) needDisk() bool {
	if s.prev.treeDisk() != treeDigest(s.treeKey) || !s.intact(artifact.Rootfs) {
		return true
	}
	return s.prev.Tree.Verity != nil && !s.intact(artifact.VerityParams)
}

func (s *state) needInitramfs() bool {
	return s.prev.treeInitramfs() != treeDigest(s.treeKey) || !s.intact(artifact.Initramfs)
}

// intact reports whether the output name has the stamp the last build recorded for it.
func (s *state) intact(name string) bool {
	return s.hashes.unchanged(filepath.Join(s.out, name))
}

// whyTree says which of the tree's inputs changed since the last build in this output directory.
func (s *state) whyTree() string {
	if s.prev.Tree == nil {
		return "no earlier build in this output directory"
	}
	var changed []string
	for k, v := range s.treeKey {
		if s.prev.Tree.Inputs[k] != v {
			changed = append(changed, k)
		}
	}
	for k := range s.prev.Tree.Inputs {
		if _, ok := s.treeKey[k]; !ok {
			changed = append(changed, k+" (gone)")
		}
	}
	if len(changed) == 0 {
		return "an output written from it changed or is missing"
	}
	slices.Sort(changed)
	return "changed: " + strings.Join(changed, ", ")
}

// whyOutput says why the output name, last written from the tree with digest prev, is written.
func (s *state) whyOutput(prev, name string) string {
	switch {
	case prev == "":
		return "not written here before"
	case prev != treeDigest(s.treeKey):
		return s.whyTree()
	default:
		return name + " changed or is missing since the last build"
	}
}
