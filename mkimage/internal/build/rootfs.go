package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/manifest"
	"github.com/allox-os/allox/mkimage/internal/spec"
	"github.com/allox-os/allox/rootfs"
)

func fetchUserland(ctx context.Context, s *state) error {
	r := s.opt.Spec.Rootfs
	tarball, pkgs, err := rootfs.Fetch(ctx, s.opt.CacheDir, rootfs.DebianSpec{Suite: r.Suite, Packages: r.Packages},
		indent(s.opt.Progress))
	if err != nil {
		return err
	}
	s.userland, s.packages = tarball, pkgs
	if s.hashes.unchanged(tarball) {
		s.reused("%s cached and hashed before", filepath.Base(tarball))
	} else {
		s.ran("hashed %s, new to this output directory", filepath.Base(tarball))
	}
	return s.prov.addInput("debian-userland", filepath.Base(tarball), fmt.Sprintf("%s, %d packages", r.Suite, len(pkgs)), tarball)
}

// stageRootfs lays our binaries, the service manifest and the mountpoints over the userland. It
// does nothing when the disk and the initramfs written from a tree of the same inputs are intact.
func stageRootfs(ctx context.Context, s *state) error {
	if err := s.keyTree(); err != nil {
		return err
	}
	if !s.needDisk() && !s.needInitramfs() {
		s.verity, s.memMiB = s.prev.Tree.Verity, s.prev.Tree.MemoryMiB
		s.next.Tree = s.prev.Tree
		s.reused("%s and %s were written from the same inputs and are intact", artifact.Rootfs, artifact.Initramfs)
		return nil
	}
	s.ran("%s", s.whyTree())
	tree, err := rootfs.Stage(s.userland)
	if err != nil {
		return err
	}
	var man bytes.Buffer
	if err := manifest.Encode(&man, s.opt.Spec.Manifest()); err != nil {
		return fmt.Errorf("service manifest: %w", err)
	}
	mounts := append([]string{}, rootfs.DefaultMountpoints...)
	mounts = append(mounts, "/sys/fs/cgroup", "/var/lib/allox", s.opt.Spec.Init.Store.Mountpoint)
	bins := s.bins
	if s.agent != nil {
		bins = append(slices.Clone(bins), *s.agent)
	}
	ov := rootfs.Overlay{Binaries: bins, Files: s.files, Manifest: man.Bytes(), Hostname: s.opt.Spec.Init.Hostname, Mountpoints: mounts,
		Accounts: []rootfs.Account{spec.RunAccount}}
	if err := ov.Apply(tree); err != nil {
		return err
	}
	s.tree = tree
	s.next.Tree = &treeRecord{Inputs: s.treeKey}
	if !s.needDisk() {
		s.next.Tree.Disk, s.next.Tree.Verity = s.prev.Tree.Disk, s.prev.Tree.Verity
	}
	if !s.needInitramfs() {
		s.next.Tree.Initramfs, s.memMiB = s.prev.Tree.Initramfs, s.prev.Tree.MemoryMiB
		s.next.Tree.MemoryMiB = s.memMiB
	}
	return nil
}

func (s *state) mtime() time.Time { return time.Unix(s.opt.Epoch, 0).UTC() }

// fsID derives a fixed UUID from the spec, so two builds of the same spec get the same filesystem.
func (s *state) fsID(purpose string) string {
	h := sha256.Sum256(append([]byte("allox "+purpose+"\n"), s.opt.SpecText...))
	h[6] = h[6]&0x0f | 0x40 // version 4 layout, deterministic content
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func writeDisk(ctx context.Context, s *state) error {
	if s.tree == nil || !s.needDisk() {
		s.verity = s.next.Tree.Verity
		s.reused("written from the same inputs and intact")
		return nil
	}
	s.ran("%s", s.whyOutput(s.prev.treeDisk(), artifact.Rootfs))
	tmp := filepath.Join(s.work, artifact.Rootfs)
	label := s.opt.Spec.Name
	if len(label) > 16 {
		label = label[:16]
	}
	opt := rootfs.DiskOptions{SizeMiB: s.opt.Spec.Rootfs.SizeMiB, Label: label, UUID: s.fsID("rootfs uuid"),
		HashSeed: s.fsID("rootfs hash seed"), Mtime: s.mtime()}
	if s.opt.Spec.Rootfs.Verity {
		opt.Verity, opt.VeritySalt = true, s.veritySalt()
	}
	disk, err := rootfs.WriteDisk(ctx, tmp, s.tree, opt)
	if err != nil {
		return err
	}
	s.verity = disk.Verity
	if err := s.place(tmp, artifact.Rootfs); err != nil {
		return err
	}
	s.next.Tree.Disk, s.next.Tree.Verity = treeDigest(s.treeKey), s.verity
	return s.writeVerityParams()
}

// veritySalt derives the dm-verity salt from the spec, as fsID derives the filesystem's ids.
func (s *state) veritySalt() []byte {
	h := sha256.Sum256(append([]byte("allox verity salt\n"), s.opt.SpecText...))
	return h[:]
}

// writeInitramfs writes the same tree with the Go init at /init, for Kata's initrd mode.
func writeInitramfs(ctx context.Context, s *state) error {
	if s.tree == nil || !s.needInitramfs() {
		s.reused("written from the same inputs and intact")
		return nil
	}
	s.ran("%s", s.whyOutput(s.prev.treeInitramfs(), artifact.Initramfs))
	init, ok := s.tree.Lookup(mustResolve(s.tree, InitPath))
	if !ok {
		return fmt.Errorf("BUG: %s missing from the staged tree", InitPath)
	}
	init.Path = "/init"
	if err := s.tree.Set(init); err != nil {
		return err
	}
	// The kernel opens /dev/console for /init before anything is mounted.
	console := initramfs.Entry{Path: "/dev/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1}
	if err := s.tree.Set(console); err != nil {
		return err
	}
	s.next.Tree.MemoryMiB = s.memoryMiB() // of the initramfs's tree, which initrd mode unpacks
	tmp := filepath.Join(s.work, artifact.Initramfs)
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	h := sha256.New()
	if err := initramfs.WriteGzip(io.MultiWriter(f, h), s.tree, s.mtime()); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := s.place(tmp, artifact.Initramfs); err != nil {
		return err
	}
	s.next.Tree.Initramfs = treeDigest(s.treeKey)
	return s.hashes.known(filepath.Join(s.out, artifact.Initramfs), hex.EncodeToString(h.Sum(nil)))
}

func mustResolve(t *initramfs.Tree, p string) string {
	if r, err := t.Resolve(p); err == nil {
		return r
	}
	return p
}
