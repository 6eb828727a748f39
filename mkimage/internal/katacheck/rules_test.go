package katacheck

import (
	"os"
	"strings"
	"testing"

	"github.com/allox-os/allox/rootfs/dax"
)

// imageTarget is a Kata image target over img; nvdimm sets disable_image_nvdimm = false.
func imageTarget(t *testing.T, img string, nvdimm bool, off ...string) *Target {
	tg := &Target{Image: img, RootfsType: "ext4", Nvdimm: nvdimm}
	tg.KernelConfig = writeKernelConfig(t, tg, off...)
	return tg
}

// wantPass fails unless every applicable rule passed.
func wantPass(t *testing.T, tg *Target) {
	t.Helper()
	r := tg.Check(t.Context())
	if err := r.Err(); err != nil {
		t.Errorf("want every rule to pass:\n%s", r)
	}
}

// wantFail fails unless rule failed with an error containing problem and the report names the
// rule's fix.
func wantFail(t *testing.T, tg *Target, rule, problem string) {
	t.Helper()
	r, res := result(t, tg, rule)
	if res.Err == nil {
		t.Fatalf("rule %s passed; want it to fail with %q:\n%s", rule, problem, r)
	}
	if !strings.Contains(res.Err.Error(), problem) {
		t.Errorf("rule %s: %v; want the problem %q", rule, res.Err, problem)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), rule+": ") || !strings.Contains(err.Error(), "fix: "+res.Fix) || res.Fix == "" {
		t.Errorf("report error %v: want it to name %s and its fix", err, rule)
	}
	for _, other := range r.Failed() {
		if other.Rule != rule {
			t.Errorf("rule %s failed too: %v", other.Rule, other.Err)
		}
	}
}

func TestGoodImagePasses(t *testing.T) {
	img := writeImage(t, goodRoot(), oneRoot)
	t.Run("virtio-blk", func(t *testing.T) { wantPass(t, imageTarget(t, img, false)) })
	t.Run("nvdimm", func(t *testing.T) { wantPass(t, imageTarget(t, withHeader(t, img, 0), true)) })
	t.Run("header as virtio-blk", func(t *testing.T) { wantPass(t, imageTarget(t, withHeader(t, img, 0), false)) })
}

func TestGoodInitrdPasses(t *testing.T) {
	tg := &Target{Initrd: writeInitrd(t, []entry{{path: "init", mode: 0o755, data: "x"}, {path: "etc", dir: true},
		{path: "etc/resolv.conf", mode: 0o644}})}
	tg.KernelConfig = writeKernelConfig(t, tg)
	wantPass(t, tg)
}

func TestRulePartitions(t *testing.T) {
	t.Run("root at 2 MiB", func(t *testing.T) {
		img := writeImage(t, goodRoot(), disk{sizeMiB: 40, parts: [][2]uint32{{4096, 38 * 2048}}})
		wantFail(t, imageTarget(t, img, false), RulePartitions, "partition 1 starts at sector 4096 (2048 KiB); want 2048 (1 MiB)")
	})
	twoParts := disk{sizeMiB: 40, parts: [][2]uint32{{2048, 30 * 2048}, {31 * 2048, 8 * 2048}}}
	t.Run("second partition without verity", func(t *testing.T) {
		img := writeImage(t, goodRoot(), twoParts)
		wantFail(t, imageTarget(t, img, false), RulePartitions, "MBR has 2 partition(s); want 1")
	})
	t.Run("hash partition with verity", func(t *testing.T) {
		img := withHeader(t, writeImage(t, goodRoot(), twoParts), 0)
		tg := &Target{Image: img, RootfsType: "ext4", Nvdimm: true, Verity: true}
		tg.KernelConfig = writeKernelConfig(t, tg)
		wantPass(t, tg)
	})
	t.Run("MBR #2 behind the header", func(t *testing.T) {
		img := withHeader(t, writeImage(t, goodRoot(), oneRoot), 0)
		corrupt(t, img, dax.HeaderSize+446+8, 0x01) // MBR #2 partition 1 now starts at sector 2049
		wantFail(t, imageTarget(t, img, false), RulePartitions, "MBR #2 (at 2 MiB) partition 1 starts at sector 2049")
	})
}

func TestRuleRootfsType(t *testing.T) {
	img := writeImage(t, goodRoot(), oneRoot)
	tg := imageTarget(t, img, false)
	tg.RootfsType = "erofs"
	tg.KernelConfig = writeKernelConfig(t, tg)
	wantFail(t, tg, RuleRootfsType, `partition 1 (at 1 MiB) holds ext4 but rootfs_type is "erofs"`)
}

func TestRuleInit(t *testing.T) {
	for _, tt := range []struct {
		name, problem string
		root          []entry
	}{
		{"not executable", "/sbin/init resolves to /usr/sbin/init with mode 0644: not executable",
			replace(goodRoot(), "usr/sbin/init", entry{path: "usr/sbin/init", mode: 0o644, data: "x"})},
		{"missing", "/sbin/init does not exist", replace(goodRoot(), "usr/sbin/init", entry{path: "usr/sbin/other", mode: 0o755})},
		{"dangling symlink", "/sbin/init does not exist (/usr/lib is missing)",
			replace(goodRoot(), "usr/sbin/init", entry{path: "usr/sbin/init", link: "/usr/lib/allox/init"})},
		{"directory", "a directory, not a regular file", replace(goodRoot(), "usr/sbin/init", entry{path: "usr/sbin/init", dir: true})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantFail(t, imageTarget(t, writeImage(t, tt.root, oneRoot), false), RuleInit, tt.problem)
		})
	}
	t.Run("symlink chain", func(t *testing.T) {
		root := replace(goodRoot(), "usr/sbin/init", entry{path: "usr/sbin/init", link: "../lib/allox/init"})
		root = append(root, entry{path: "usr/lib/allox/init", mode: 0o755, data: "x"})
		wantPass(t, imageTarget(t, writeImage(t, root, oneRoot), false))
	})
	t.Run("initrd without /init", func(t *testing.T) {
		tg := &Target{Initrd: writeInitrd(t, []entry{{path: "sbin/init", mode: 0o755, data: "x"}, {path: "etc/resolv.conf", mode: 0o644}})}
		tg.KernelConfig = writeKernelConfig(t, tg)
		wantFail(t, tg, RuleInit, "/init does not exist")
	})
}

func TestRuleResolvConf(t *testing.T) {
	root := replace(goodRoot(), "etc/resolv.conf", entry{path: "etc/resolv.conf", link: "../run/systemd/resolve/stub-resolv.conf"})
	wantFail(t, imageTarget(t, writeImage(t, root, oneRoot), false), RuleResolvConf,
		`/etc/resolv.conf is a symlink to "../run/systemd/resolve/stub-resolv.conf"`)
	t.Run("initrd", func(t *testing.T) {
		tg := &Target{Initrd: writeInitrd(t, []entry{{path: "init", mode: 0o755, data: "x"}})}
		tg.KernelConfig = writeKernelConfig(t, tg)
		wantFail(t, tg, RuleResolvConf, "/etc/resolv.conf does not exist")
	})
}

func TestRuleImageSize(t *testing.T) {
	t.Run("nvdimm not 128 MiB aligned", func(t *testing.T) {
		img := withHeader(t, writeImage(t, goodRoot(), oneRoot), dax.Align) // 42 MiB: a valid header, a bad size
		wantFail(t, imageTarget(t, img, true), RuleImageSize, "image is 44040192 bytes; want a multiple of 128 MiB, as an NVDIMM: 134217728 bytes")
	})
	t.Run("virtio-blk partial sector", func(t *testing.T) {
		img := writeImage(t, goodRoot(), oneRoot)
		f, err := os.OpenFile(img, os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.Write([]byte("tail"))
		must(t, f.Close())
		must(t, err)
		wantFail(t, imageTarget(t, img, false), RuleImageSize, "want whole 512-byte sectors")
	})
}

func TestRuleDAXHeader(t *testing.T) {
	img := writeImage(t, goodRoot(), disk{sizeMiB: 128, parts: [][2]uint32{{2048, 127 * 2048}}})
	t.Run("missing", func(t *testing.T) {
		wantFail(t, imageTarget(t, img, true), RuleDAXHeader, "no NVDIMM PFN info block at 4 KiB but disable_image_nvdimm is false")
	})
	t.Run("corrupt", func(t *testing.T) {
		headed := withHeader(t, writeImage(t, goodRoot(), oneRoot), 0)
		corrupt(t, headed, dax.InfoOffset+56, 0x10) // dataoff, without fixing the checksum
		wantFail(t, imageTarget(t, headed, true), RuleDAXHeader, "checksum")
	})
}

func TestRuleKernelConfig(t *testing.T) {
	img := writeImage(t, goodRoot(), oneRoot)
	wantFail(t, imageTarget(t, img, false, "VIRTIO_VSOCKETS"), RuleKernelConfig,
		"CONFIG_VIRTIO_VSOCKETS=n (for vsock, the agent's ttRPC transport)")
	t.Run("nvdimm needs pmem", func(t *testing.T) {
		wantFail(t, imageTarget(t, withHeader(t, img, 0), true, "FS_DAX"), RuleKernelConfig, "CONFIG_FS_DAX=n (for the NVDIMM root with DAX)")
	})
	t.Run("verity needs dm-verity", func(t *testing.T) {
		tg := &Target{Image: img, RootfsType: "ext4", Verity: true}
		tg.KernelConfig = writeKernelConfig(t, tg, "DM_INIT")
		r, res := result(t, tg, RuleKernelConfig)
		if res.Err == nil || !strings.Contains(res.Err.Error(), "CONFIG_DM_INIT=n") {
			t.Errorf("kernel-config with verity and no DM_INIT: %v\n%s", res.Err, r)
		}
	})
}

// corrupt XORs the byte at off with x.
func corrupt(t *testing.T, path string, off int64, x byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	must(t, err)
	b[0] ^= x
	_, err = f.WriteAt(b, off)
	must(t, err)
}

// TestRuleAgent: an image without /usr/bin/kata-agent is not usable by a Kata runtime: a warning,
// or a failure when the spec says it is for Kata (require_agent).
func TestRuleAgent(t *testing.T) {
	withAgent := append(goodRoot(), entry{path: "usr/bin/kata-agent", link: "/opt/kata/bin/kata-agent"},
		entry{path: "opt/kata/bin/kata-agent", mode: 0o755, data: "#!/bin/sh\n"})
	t.Run("missing, not required", func(t *testing.T) {
		tg := imageTarget(t, writeImage(t, goodRoot(), oneRoot), false)
		r, res := result(t, tg, RuleAgent)
		if res.Err != nil || res.Warning == nil || !strings.Contains(res.Warning.Error(), "/usr/bin/kata-agent does not exist: the image is not usable by a Kata runtime") {
			t.Errorf("result %+v; want a warning, not a failure", res)
		}
		if r.Err() != nil || len(r.Warnings()) != 1 || !strings.Contains(r.String(), "warn kata-agent: /usr/bin/kata-agent does not exist") {
			t.Errorf("report:\n%s", r)
		}
	})
	t.Run("missing, required", func(t *testing.T) {
		tg := imageTarget(t, writeImage(t, goodRoot(), oneRoot), false)
		tg.RequireAgent = true
		wantFail(t, tg, RuleAgent, "/usr/bin/kata-agent does not exist")
	})
	t.Run("not executable, required", func(t *testing.T) {
		root := replace(withAgent, "opt/kata/bin/kata-agent", entry{path: "opt/kata/bin/kata-agent", mode: 0o644, data: "x"})
		tg := imageTarget(t, writeImage(t, root, oneRoot), false)
		tg.RequireAgent = true
		wantFail(t, tg, RuleAgent, "/usr/bin/kata-agent resolves to /opt/kata/bin/kata-agent with mode 0644: not executable")
	})
	t.Run("through a symlink", func(t *testing.T) {
		tg := imageTarget(t, writeImage(t, withAgent, oneRoot), false)
		tg.RequireAgent = true
		if _, res := result(t, tg, RuleAgent); res.Err != nil || res.Warning != nil {
			t.Errorf("result %+v; want a pass", res)
		}
	})
	t.Run("initrd", func(t *testing.T) {
		tg := &Target{Initrd: writeInitrd(t, []entry{{path: "init", mode: 0o755, data: "x"}, {path: "etc/resolv.conf", mode: 0o644}}), RequireAgent: true}
		tg.KernelConfig = writeKernelConfig(t, tg)
		wantFail(t, tg, RuleAgent, "/usr/bin/kata-agent does not exist")
	})
}

// The drop-in's block_device_driver and the kernel agree: virtio-scsi (Kata's default, also when
// the drop-in leaves it unset) needs the SCSI midlayer, the virtio HBA and sd disks; virtio-blk
// needs VIRTIO_BLK and no SCSI.
func TestRuleBlockDriver(t *testing.T) {
	img := writeImage(t, goodRoot(), oneRoot)
	target := func(driver string, off ...string) *Target {
		tg := &Target{Image: img, RootfsType: "ext4", BlockDeviceDriver: driver}
		tg.KernelConfig = writeKernelConfig(t, tg, off...)
		return tg
	}
	t.Run("default is virtio-scsi", func(t *testing.T) {
		wantFail(t, target("", "SCSI_VIRTIO"), RuleBlockDriver,
			"CONFIG_SCSI_VIRTIO=n (for block_device_driver = virtio-scsi (Kata's default))")
	})
	t.Run("virtio-scsi needs sd", func(t *testing.T) {
		wantFail(t, target("virtio-scsi", "BLK_DEV_SD"), RuleBlockDriver, "CONFIG_BLK_DEV_SD=n (for block_device_driver = virtio-scsi)")
	})
	t.Run("virtio-blk needs no SCSI", func(t *testing.T) {
		tg := &Target{Image: img, RootfsType: "ext4", BlockDeviceDriver: "virtio-blk"}
		tg.KernelConfig = writeKernelConfig(t, tg) // only VIRTIO_BLK of the two drivers
		wantPass(t, tg)
	})
	t.Run("virtio-blk without VIRTIO_BLK", func(t *testing.T) {
		_, res := result(t, target("virtio-blk", "VIRTIO_BLK"), RuleBlockDriver)
		if res.Err == nil || !strings.Contains(res.Err.Error(), "CONFIG_VIRTIO_BLK=n (for block_device_driver = virtio-blk)") {
			t.Errorf("block-device-driver: %v; want CONFIG_VIRTIO_BLK named", res.Err)
		}
	})
	t.Run("unknown driver", func(t *testing.T) {
		wantFail(t, target("nvdimm"), RuleBlockDriver, `block_device_driver "nvdimm": use "virtio-scsi"`)
	})
}
