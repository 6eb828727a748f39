package katacheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestLoad(t *testing.T) {
	for _, tt := range []struct {
		name, toml string
		want       func(dir string) *Target
		err        string
	}{{
		name: "image as NVDIMM by Kata's default",
		toml: "[hypervisor.qemu]\nimage = \"/opt/allox/allox/rootfs.img\"\ninitrd = \"\"\n",
		want: func(dir string) *Target {
			return &Target{Image: filepath.Join(dir, "rootfs.img"), KernelConfig: filepath.Join(dir, "kernel.config"), RootfsType: "ext4", Nvdimm: true}
		},
	}, {
		name: "image as virtio-blk with verity",
		toml: "[hypervisor.qemu]\nimage = \"/i\"\ndisable_image_nvdimm = true\nrootfs_type = \"ext4\"\nkernel_verity_params = \"root_hash=ab\"\n",
		want: func(dir string) *Target {
			return &Target{Image: filepath.Join(dir, "rootfs.img"), KernelConfig: filepath.Join(dir, "kernel.config"), RootfsType: "ext4", Verity: true}
		},
	}, {
		name: "initrd",
		toml: "[hypervisor.qemu]\nimage = \"\"\ninitrd = \"/opt/allox/allox/initramfs.cpio.gz\"\n",
		want: func(dir string) *Target {
			return &Target{Initrd: filepath.Join(dir, "initramfs.cpio.gz"), KernelConfig: filepath.Join(dir, "kernel.config"), RootfsType: "ext4"}
		},
	}, {
		name: "both",
		toml: "[hypervisor.qemu]\nimage = \"/i\"\ninitrd = \"/r\"\n",
		err:  "sets both image and initrd",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "kata", "config.d", "50-allox.toml")
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, os.WriteFile(p, []byte(tt.toml), 0o644))
			got, err := Load(dir)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Load: %v; want an error containing %q", err, tt.err)
				}
				return
			}
			must(t, err)
			if diff := cmp.Diff(tt.want(dir), got, cmpopts.IgnoreUnexported(Target{})); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "mkimage build") {
		t.Errorf("Load of an empty directory: %v; want it to say to build first", err)
	}
}
