package kata

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

const mib = 1 << 20

// rootfsTypes are the filesystems Kata mounts an image with.
var rootfsTypes = []string{"ext4", "xfs", "erofs"}

// kataOwnedParams are kernel parameters Kata derives from image and rootfs_type itself.
var kataOwnedParams = []string{"root", "rootflags", "rootfstype"}

// Validate checks a and reports every problem, each naming its field and the fix.
func (a Assets) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if err := checkPath("Kernel", a.Kernel); err != nil {
		errs = append(errs, err)
	} else if a.Kernel == "" {
		add("Kernel is empty: set the absolute install path of the guest kernel")
	}
	for _, f := range []struct{ name, value string }{{"Image", a.Image}, {"Initrd", a.Initrd}} {
		if err := checkPath(f.name, f.value); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case a.Image != "" && a.Initrd != "":
		add("Image and Initrd are both set: Kata refuses to start with both; keep one")
	case a.Image == "" && a.Initrd == "":
		add("neither Image nor Initrd is set: set the absolute install path of one")
	case a.Image != "":
		errs = append(errs, a.validateImage()...)
	default:
		errs = append(errs, a.validateInitrd()...)
	}
	if _, err := BlockDriverKernelSymbols(a.BlockDeviceDriver); err != nil {
		add("BlockDeviceDriver: %w", err)
	}
	if a.DefaultMemoryMiB < 0 {
		add("DefaultMemoryMiB is %d: set a size in MiB, or 0 for Kata's default", a.DefaultMemoryMiB)
	}
	for i, p := range a.KernelParams {
		if err := checkParam(p); err != nil {
			add("KernelParams[%d] %q: %w", i, p, err)
		}
	}
	for i, n := range a.EnableAnnotations {
		if err := CheckAnnotation(n); err != nil {
			add("EnableAnnotations[%d]: %w", i, err)
		} else if slices.Index(a.EnableAnnotations, n) < i {
			add("EnableAnnotations[%d] %q is listed twice: drop one", i, n)
		}
	}
	return errors.Join(errs...)
}

func (a Assets) validateImage() []error {
	var errs []error
	switch {
	case a.RootfsType == "":
		errs = append(errs, fmt.Errorf("RootfsType is empty: set the image's filesystem, one of %s", strings.Join(rootfsTypes, ", ")))
	case !slices.Contains(rootfsTypes, a.RootfsType):
		errs = append(errs, fmt.Errorf("RootfsType %q is not one Kata mounts: use one of %s", a.RootfsType, strings.Join(rootfsTypes, ", ")))
	}
	if a.InitrdBytes != 0 {
		errs = append(errs, fmt.Errorf("InitrdBytes is %d but there is no Initrd: leave it 0 with Image", a.InitrdBytes))
	}
	if a.KernelVerityParams != "" {
		if _, err := ParseKernelVerityParams(a.KernelVerityParams); err != nil {
			errs = append(errs, fmt.Errorf("KernelVerityParams %q: %w", a.KernelVerityParams, err))
		}
	}
	return errs
}

func (a Assets) validateInitrd() []error {
	var errs []error
	if a.RootfsType != "" {
		errs = append(errs, fmt.Errorf("RootfsType %q applies to an Image only: leave it empty with Initrd", a.RootfsType))
	}
	if a.DisableImageNvdimm {
		errs = append(errs, errors.New("DisableImageNvdimm applies to an Image only: leave it false with Initrd"))
	}
	if a.KernelVerityParams != "" {
		errs = append(errs, errors.New("KernelVerityParams applies to an Image only (Kata protects the image with dm-verity, never an initrd): leave it empty with Initrd"))
	}
	switch need := a.InitrdBytes/mib + 1; {
	case a.InitrdBytes <= 0:
		errs = append(errs, fmt.Errorf("InitrdBytes is %d: set the initrd's size in bytes (Kata refuses an empty initrd and needs the size to check memory)", a.InitrdBytes))
	case a.DefaultMemoryMiB == 0:
		errs = append(errs, fmt.Errorf("DefaultMemoryMiB is 0 with Initrd: set it explicitly, at least %d for this %.1f MiB initrd, plus room for the guest's work", need, float64(a.InitrdBytes)/mib))
	case int64(a.DefaultMemoryMiB) < need:
		errs = append(errs, fmt.Errorf("DefaultMemoryMiB %d does not exceed the initrd's %.1f MiB (Kata then refuses to start, since the initrd is read whole into guest RAM): set it to at least %d, plus room for the guest's work",
			a.DefaultMemoryMiB, float64(a.InitrdBytes)/mib, need))
	}
	return errs
}

// checkPath accepts "" (unset) or a clean absolute path of printable UTF-8.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return nil
	case !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("%s %q: the path has invalid UTF-8 or control characters: rename the file", field, p)
	case !path.IsAbs(p):
		return fmt.Errorf("%s %q is relative: set the absolute path where the file is installed on the host", field, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%s %q is not clean: write it as %q", field, p, path.Clean(p))
	}
	return nil
}

func checkParam(p string) error {
	switch {
	case p == "":
		return errors.New("empty: drop it")
	case !utf8.ValidString(p):
		return errors.New("invalid UTF-8")
	case strings.ContainsFunc(p, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return errors.New("contains a space or control character: give each parameter as its own element (Kata splits kernel_params on spaces)")
	}
	name, _, _ := strings.Cut(p, "=")
	if slices.Contains(kataOwnedParams, name) {
		return fmt.Errorf("Kata sets %s= itself from image, rootfs_type and disable_image_nvdimm: drop it", name)
	}
	return nil
}
