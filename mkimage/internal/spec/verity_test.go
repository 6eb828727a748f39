package spec

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseVerity(t *testing.T) {
	img, diags := Parse("test.hcl", []byte(validSpec), "../../../images")
	if diags.HasErrors() {
		t.Fatal(render(t, diags))
	}
	if img.Rootfs.Verity {
		t.Error("rootfs.verity defaults to true; want false")
	}
	src := strings.Replace(validSpec, "kata {", "rootfs {\n  verity = true\n}\nkata {", 1)
	img, diags = Parse("test.hcl", []byte(src), "../../../images")
	if diags.HasErrors() {
		t.Fatal(render(t, diags))
	}
	if !img.Rootfs.Verity {
		t.Error("verity = true did not set Rootfs.Verity")
	}
}

func TestParseVerityErrors(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		want           []string
	}{{
		name: "verity in initrd mode",
		old:  "kata {\n  boot_mode = \"image\"",
		new:  "rootfs {\n  verity = true\n}\nkata {\n  boot_mode = \"initrd\"",
		want: []string{`36:12: dm-verity needs image mode: rootfs.verity verifies the root disk image, but kata.boot_mode is "initrd", which boots no disk. Set boot_mode = "image" or remove verity.`},
	}, {
		name: "verity as a string",
		old:  "kata {",
		new:  "rootfs {\n  verity = \"yes\"\n}\nkata {",
		want: []string{`36:12: Unsuitable value type: Unsuitable value: a bool is required`},
	}, {
		name: "verity off in initrd mode is fine",
		old:  "kata {\n  boot_mode = \"image\"",
		new:  "rootfs {\n  verity = false\n}\nkata {\n  boot_mode = \"initrd\"",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(validSpec, tc.old, tc.new, 1)
			if src == validSpec {
				t.Fatalf("edit %q not found in the base spec", tc.old)
			}
			_, diags := Parse("test.hcl", []byte(src), "../../../images")
			if diff := cmp.Diff(tc.want, render(t, diags)); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}

// The appliance of the guest's verity tests is the default one with rootfs.verity on: everything
// else, the kernel inputs first, must stay as in images/allox.hcl, or the test would be testing a
// different appliance (and `make image` would build a second kernel).
func TestVeritySpec(t *testing.T) {
	def, v := loadAppliances(t, "verity.hcl")
	if def.Rootfs.Verity || !v.Rootfs.Verity {
		t.Errorf("rootfs.verity: images/allox.hcl %v, verity.hcl %v; want false and true", def.Rootfs.Verity, v.Rootfs.Verity)
	}
	v.Rootfs.Verity = false
	v.File, v.Output = def.File, def.Output
	if diff := cmp.Diff(def, v); diff != "" {
		t.Errorf("verity.hcl drifted from images/allox.hcl beyond rootfs.verity (-default +verity):\n%s", diff)
	}
}

// The bench's "before parity" appliance is the default one without the 80-kata-* fragments and the
// parity proof: nothing else may differ, or the bench would measure something besides parity.
func TestNoKataParitySpec(t *testing.T) {
	def, v := loadAppliances(t, "no-kata-parity.hcl")
	var parity []string
	for _, f := range def.Kernel.Fragments {
		if strings.HasPrefix(filepath.Base(f), "80-kata-") {
			parity = append(parity, f)
		}
	}
	if len(parity) == 0 || def.Kernel.KataParity == nil || v.Kernel.KataParity != nil {
		t.Fatalf("want images/allox.hcl with 80-kata-* fragments (%d) and kata_parity, no-kata-parity.hcl without kata_parity", len(parity))
	}
	for _, f := range v.Kernel.Fragments {
		if strings.HasPrefix(filepath.Base(f), "80-kata-") {
			t.Errorf("no-kata-parity.hcl reads parity fragment %s", f)
		}
	}
	v.Kernel.Fragments = append(v.Kernel.Fragments, parity...)
	v.Kernel.KataParity = def.Kernel.KataParity
	// Without 80-kata-block.conf the kernel has no SCSI, so Kata must attach disks as virtio-blk.
	if v.Kata.BlockDeviceDriver != "virtio-blk" {
		t.Errorf("no-kata-parity.hcl: block_device_driver %q; its kernel has only virtio-blk", v.Kata.BlockDeviceDriver)
	}
	v.Kata.BlockDeviceDriver = def.Kata.BlockDeviceDriver
	v.File, v.Output = def.File, def.Output
	if diff := cmp.Diff(def, v); diff != "" {
		t.Errorf("no-kata-parity.hcl drifted from images/allox.hcl beyond the parity fragments (-default +before):\n%s", diff)
	}
}
