package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/allox-os/allox/internal/manifest"
)

var (
	idRE            = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	versionRE       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+~_-]*$`)
	debPackageRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debVersionRE    = regexp.MustCompile(`^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$`)
	suiteRE         = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	bootModes       = []string{BootImage, BootInitrd}
	filesystems     = []string{DefaultFilesystem}
	restartPolicies = []string{manifest.RestartAlways, manifest.RestartOnFailure, manifest.RestartNever}
)

// validate runs the semantic checks over the typed, resolved image.
func (d *decoder) validate(img *Image) {
	d.checkID("name", "image name", img.Name)
	if img.Version != "" && !versionRE.MatchString(img.Version) {
		d.errorf("version", "Invalid version",
			"version %q may hold only letters, digits, '.', '+', '~', '_' and '-', starting with a letter or digit, e.g. \"0.1.0\".", img.Version)
	}
	d.validateKernel(&img.Kernel)
	d.validateInit(&img.Init)
	d.validateRootfs(&img.Rootfs)
	d.validateServices(img.Services)
	d.validateKata(&img.Kata, &img.Rootfs, img.Services)
	if img.Output.Dir == "" {
		d.errorf("output.dir", "Empty output directory", "Set dir to a directory path, or remove it for the default %q.", DefaultOutputDir)
	}
	if !d.diags.HasErrors() {
		if err := img.Manifest().Validate(); err != nil {
			d.errorf("", "BUG: spec passed validation but its manifest did not", "%v. Please report this.", err)
		}
	}
}

// checkID checks a name that ends up in file names and logs.
func (d *decoder) checkID(key, what, s string) {
	if len(s) <= 63 && idRE.MatchString(s) {
		return
	}
	d.errorf(key, "Invalid "+what,
		"%s %q must be 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; for example %q.",
		what, s, sanitizeID(s))
}

// sanitizeID computes the nearest valid id, for the detail of an invalid one.
func sanitizeID(s string) string {
	id := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
	id = strings.TrimLeft(id, "._-")
	if len(id) > 63 {
		id = id[:63]
	}
	if id == "" {
		return "allox"
	}
	return id
}

func (d *decoder) validateRootfs(r *Rootfs) {
	if !suiteRE.MatchString(r.Suite) {
		d.errorf("rootfs.suite", "Invalid suite", "suite must be a Debian suite or codename such as %q; got %q.", DefaultSuite, r.Suite)
	}
	for i, p := range r.Packages {
		if !debPackageRE.MatchString(p) {
			d.errorf(fmt.Sprintf("rootfs.packages.%d", i), "Invalid package name", "%q is not a Debian package name: %s", p, packageFix(p))
		}
	}
	slices.Sort(r.Packages)
	r.Packages = slices.Compact(r.Packages)
	if !slices.Contains(filesystems, r.Filesystem) {
		d.errorf("rootfs.filesystem", "Unsupported root filesystem",
			"rootfs.filesystem %q is not supported; only %s is. Set filesystem = %q or remove the attribute.",
			r.Filesystem, quoteList(filesystems), DefaultFilesystem)
	}
	if r.SizeMiB < 0 {
		d.errorf("rootfs.size_mib", "Invalid rootfs size", "size_mib must be a positive number of MiB, or 0 (or absent) to size the image automatically; got %d.", r.SizeMiB)
	}
	d.validateNpm(r.Npm)
}

// blockDrivers are the block_device_driver values whose kernel drivers kata-check knows.
var blockDrivers = []string{"virtio-scsi", "virtio-blk"}

func (d *decoder) validateKata(k *Kata, r *Rootfs, services []Service) {
	if !slices.Contains(bootModes, k.BootMode) {
		d.errorf("kata.boot_mode", "Unknown boot mode", "boot_mode must be %s; got %q.%s",
			quoteList(bootModes), k.BootMode, didYouMean(k.BootMode, bootModes))
	}
	if k.RootfsType != r.Filesystem && slices.Contains(filesystems, r.Filesystem) && !d.suppressed("rootfs.filesystem") {
		d.errorf("kata.rootfs_type", "rootfs_type does not match the root filesystem",
			"kata.rootfs_type is %q but rootfs.filesystem is %q; Kata must mount the filesystem the image has. Set rootfs_type = %q.",
			k.RootfsType, r.Filesystem, r.Filesystem)
	}
	d.checkParams("kata.kernel_params", k.KernelParams)
	d.checkAnnotations("kata.enable_annotations", k.EnableAnnotations)
	if !slices.Contains(blockDrivers, k.BlockDeviceDriver) {
		d.errorf("kata.block_device_driver", "Unknown block device driver",
			"kata.block_device_driver must be %s (how Kata attaches container block devices; the kernel must have its driver); got %q.%s",
			quoteList(blockDrivers), k.BlockDeviceDriver, didYouMean(k.BlockDeviceDriver, blockDrivers))
	}
	if k.Nvdimm && k.BootMode == BootInitrd {
		d.errorf("kata.nvdimm", "NVDIMM needs image mode",
			"kata.nvdimm attaches the root disk image as an NVDIMM, but kata.boot_mode is %q, which boots no disk. Set boot_mode = %q or remove nvdimm.",
			k.BootMode, BootImage)
	}
	d.validateAgent(k, services)
	if r.Verity && k.BootMode == BootInitrd {
		d.errorf("rootfs.verity", "dm-verity needs image mode",
			"rootfs.verity verifies the root disk image, but kata.boot_mode is %q, which boots no disk. Set boot_mode = %q or remove verity.",
			k.BootMode, BootImage)
	}
}

// packageFix says how to write a package name, with the corrected name when one is evident.
func packageFix(p string) string {
	const rule = "use lowercase letters, digits, '+', '-' and '.', at least two characters"
	if fixed := strings.ToLower(strings.TrimSpace(p)); fixed != p && debPackageRE.MatchString(fixed) {
		return fmt.Sprintf("%s; write %q.", rule, fixed)
	}
	return rule + "."
}
