package kata

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"github.com/allox-os/allox/internal/artifact"
)

// Files RenderDeployment adds beside the drop-ins, relative to the output's kata/ directory.
const (
	ContainerdV3 = "containerd/config-v3.toml" // containerd 2.x (config version 3)
	ContainerdV2 = "containerd/config-v2.toml" // containerd 1.7 (config version 2)
	RuntimeClass = "runtimeclass.yaml"
	InstallSh    = "install.sh"
)

// Kata's shims as kata-deploy installs them, and their shipped QEMU configuration file names.
const (
	GoShim           = "/opt/kata/bin/containerd-shim-kata-v2"
	RuntimeRsShim    = "/opt/kata/runtime-rs/bin/containerd-shim-kata-v2"
	KataDefaults     = "/opt/kata/share/defaults/kata-containers"
	GoConfigFile     = "configuration-qemu.toml"
	RuntimeRsConfig  = "runtime-rs/configuration-qemu-runtime-rs.toml"
	installRoot      = "/opt/allox"
	kataConfigPrefix = "/etc/kata-containers"
)

// Deployment is everything a platform team needs to run one image under Kata: the drop-ins, the
// containerd runtime handlers, the Kubernetes RuntimeClasses and the install script.
type Deployment struct {
	// Name is the image name: the artifacts install below InstallDir(Name), the runtime-rs handler
	// and RuntimeClass are called Name and the Go runtime's Name+"-go".
	Name string
	// Release names this build's artifacts (ReleaseOf computes it from their contents): install.sh
	// puts them in InstallDir(Name)/Release, beside the previous release, which it removes only
	// once the drop-ins name the new one.
	Release string
	// Assets are the drop-ins' settings; Kernel and Image or Initrd must lie in
	// InstallDir(Name)/Release, named as in the build output (bzImage, rootfs.img,
	// initramfs.cpio.gz).
	Assets Assets
	// ConfigDir is the Kata configuration directory the handlers' ConfigPath points into; "" is
	// /etc/kata-containers/<Name>. install.sh takes the directory as its argument.
	ConfigDir string
}

// InstallDir is where the artifacts of image name are installed on a Kata host.
func InstallDir(name string) string { return installRoot + "/" + name }

func (d Deployment) releaseDir() string { return InstallDir(d.Name) + "/" + d.Release }

// ReleaseOf names a release by its artifacts' contents: the first 16 hex digits of the sha256 over
// each file's base name and sha256, in the order given.
func ReleaseOf(files ...string) (string, error) {
	return ReleaseOfHashed(artifact.SHA256File, files...)
}

// ReleaseOfHashed is ReleaseOf with the files' hex sha256 from sum, for a caller that already
// knows them.
func ReleaseOfHashed(sum func(path string) (string, error), files ...string) (string, error) {
	h := sha256.New()
	for _, p := range files {
		s, err := sum(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		fmt.Fprintf(h, "%s %s\n", filepath.Base(p), s)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func (d Deployment) configDir() string {
	if d.ConfigDir == "" {
		return kataConfigPrefix + "/" + d.Name
	}
	return d.ConfigDir
}

var (
	validName    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,52}[a-z0-9])?$`)
	validRelease = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,63}$`)
)

// validate checks what RenderDeployment needs beyond Assets.Validate.
func (d Deployment) validate() error {
	var errs []error
	if !validName.MatchString(d.Name) {
		errs = append(errs, fmt.Errorf("Name %q: use lowercase letters, digits and '-' (a Kubernetes RuntimeClass name, at most 54 characters so %q fits)", d.Name, d.Name+"-go"))
	}
	if !validRelease.MatchString(d.Release) {
		errs = append(errs, fmt.Errorf("Release %q: use 1 to 64 lowercase letters, digits, '.' and '-', e.g. kata.ReleaseOf(kernel, image)", d.Release))
	}
	if err := checkPath("ConfigDir", d.ConfigDir); err != nil {
		errs = append(errs, err)
	} else if strings.ContainsFunc(d.ConfigDir, unicode.IsSpace) {
		errs = append(errs, fmt.Errorf("ConfigDir %q contains white space: install.sh refuses it; choose a directory without", d.ConfigDir))
	}
	dir := d.releaseDir()
	for _, f := range []struct{ field, p string }{{"Kernel", d.Assets.Kernel}, {"Image", d.Assets.Image}, {"Initrd", d.Assets.Initrd}} {
		if f.p != "" && path.Dir(f.p) != dir {
			errs = append(errs, fmt.Errorf("Assets.%s %q is not in %s: install.sh installs there; set it to %s", f.field, f.p, dir, path.Join(dir, path.Base(f.p))))
		}
	}
	return errors.Join(errs...)
}

// RenderDeployment validates d and returns, relative to the output's kata/ directory, the two
// drop-ins, the containerd snippets (2.x and 1.7), the RuntimeClasses and install.sh. The output is
// a pure function of d: byte-identical across runs.
func RenderDeployment(d Deployment) ([]File, error) {
	if err := errors.Join(d.validate(), d.Assets.Validate()); err != nil {
		return nil, err
	}
	files, err := Render(d.Assets)
	if err != nil {
		return nil, err
	}
	return append(files,
		File{Name: ContainerdV3, Data: d.containerd(pluginV3)},
		File{Name: ContainerdV2, Data: d.containerd(pluginV2)},
		File{Name: RuntimeClass, Data: d.runtimeClasses()},
		File{Name: InstallSh, Data: d.installScript(files), Executable: true},
	), nil
}
