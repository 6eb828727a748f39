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
	bins := append(slices.Clone(s.bins), s.npm...)
	if s.agent != nil {
		bins = append(bins, *s.agent)
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
	s.startInitramfs() // beside the disk: the initramfs stage waits for it
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

// writeInitramfs writes the same tree with the Go init at /init, for Kata's initrd mode. The
// writing starts beside the disk's (startInitramfs) when both are written.
func writeInitramfs(ctx context.Context, s *state) error {
	if s.tree == nil || !s.needInitramfs() {
		s.reused("written from the same inputs and intact")
		return nil
	}
	s.ran("%s", s.whyOutput(s.prev.treeInitramfs(), artifact.Initramfs))
	s.startInitramfs() // not started yet when the disk was reused
	job := s.initrd
	<-job.done
	if job.err != nil {
		return job.err
	}
	s.memMiB, s.next.Tree.MemoryMiB = job.memMiB, job.memMiB
	if err := s.place(job.tmp, artifact.Initramfs); err != nil {
		return err
	}
	s.next.Tree.Initramfs = treeDigest(s.treeKey)
	return s.hashes.known(filepath.Join(s.out, artifact.Initramfs), job.sum)
}

// initramfsJob is the initramfs being written in the scratch space.
type initramfsJob struct {
	tmp    string
	done   chan struct{}
	sum    string // hex sha256 of the file
	memMiB int    // what initrd mode needs for it (treeMemoryMiB)
	err    error
}

// startInitramfs starts writing the initramfs from a copy of the staged tree, when it is to be
// written and is not yet being written.
func (s *state) startInitramfs() {
	if s.initrd != nil || s.tree == nil || !s.needInitramfs() {
		return
	}
	job := &initramfsJob{tmp: filepath.Join(s.work, artifact.Initramfs), done: make(chan struct{})}
	tree, mtime := s.tree.Clone(), s.mtime()
	s.initrd = job
	go func() {
		defer close(job.done)
		job.sum, job.memMiB, job.err = writeInitramfsFile(tree, job.tmp, mtime)
	}()
}

// waitInitramfs waits for an initramfs being written, so that a failed build leaves nothing
// writing into its scratch space.
func (s *state) waitInitramfs() {
	if s.initrd != nil {
		<-s.initrd.done
	}
}

// writeInitramfsFile adds /init and /dev/console to tree and writes it to tmp.
func writeInitramfsFile(tree *initramfs.Tree, tmp string, mtime time.Time) (sum string, memMiB int, err error) {
	init, ok := tree.Lookup(mustResolve(tree, InitPath))
	if !ok {
		return "", 0, fmt.Errorf("BUG: %s missing from the staged tree", InitPath)
	}
	init.Path = "/init"
	if err := tree.Set(init); err != nil {
		return "", 0, err
	}
	// The kernel opens /dev/console for /init before anything is mounted.
	console := initramfs.Entry{Path: "/dev/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1}
	if err := tree.Set(console); err != nil {
		return "", 0, err
	}
	f, err := os.Create(tmp)
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	if err := initramfs.WriteGzip(io.MultiWriter(f, h), tree, mtime); err != nil {
		f.Close()
		return "", 0, err
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), treeMemoryMiB(tree), nil
}

func mustResolve(t *initramfs.Tree, p string) string {
	if r, err := t.Resolve(p); err == nil {
		return r
	}
	return p
}
