package kata

import (
	_ "embed"
	"path"
	"strings"

	"github.com/allox-os/allox/internal/artifact"
)

// Files install.sh keeps in CONFIG_DIR beside the configurations (never in config.d/, which both
// runtimes read whole): the record of what it installed, and its staging directory.
const (
	installRecordPrefix = "allox-"  // + Name + ".installed"
	installStagePrefix  = ".allox-" // + Name + ".staging"
	configFileMode      = 0o640     // drop-ins, Kata configuration copies, the record
	artifactFileMode    = 0o644     // kernel, image, initrd: rootless QEMU must read them
	installDirMode      = 0o755     //
)

//go:embed install.sh.in
var installTemplate string

// installScript renders install.sh for d: POSIX sh that checks every file against manifest.json
// (path and sha256) and Kata's shipped configurations before it writes anything, installs in an
// order an interruption cannot break, and uninstalls exactly what it installed (install.sh.in).
func (d Deployment) installScript(dropIns []File) []byte {
	var artifacts, dropins []string
	for _, p := range []string{d.Assets.Kernel, d.Assets.Image, d.Assets.Initrd} {
		if p != "" {
			artifacts = append(artifacts, path.Base(p))
		}
	}
	for _, f := range dropIns {
		dropins = append(dropins, f.Name)
	}
	r := strings.NewReplacer(
		"@NAME@", d.Name,
		"@RELEASE@", d.Release,
		"@INSTALL_DIR@", InstallDir(d.Name),
		"@RELEASE_DIR@", d.releaseDir(),
		"@CONFIG_DIR@", d.configDir(),
		"@KATA_DEFAULTS@", KataDefaults,
		"@RECORD@", installRecordPrefix+d.Name+".installed",
		"@STAGE@", installStagePrefix+d.Name+".staging",
		"@ARTIFACTS@", strings.Join(artifacts, " "),
		"@DROPINS@", strings.Join(dropins, " "),
		"@CONFIGS@", GoConfigFile+" "+RuntimeRsConfig,
		"@ATTESTATION@", artifact.Attestation,
		"@INSTALL_SH@", InstallSh,
	)
	return []byte(r.Replace(installTemplate))
}
