package build

import (
	"path/filepath"

	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/mkimage/internal/spec"
)

// Plan is what `mkimage plan` prints: the resolved spec, the stages in order and where every
// artifact will be written. Computing it does no build work.
type Plan struct {
	Spec     *spec.Image       `json:"spec"`
	Stages   []string          `json:"stages"`
	CacheDir string            `json:"cache_dir"`
	Outputs  map[string]string `json:"outputs"`
	Install  string            `json:"kata_install_dir"`
}

// NewPlan resolves the plan for img.
func NewPlan(img *spec.Image, cacheDir string) *Plan {
	p := &Plan{Spec: img, CacheDir: cacheDir, Install: InstallDir(img), Outputs: map[string]string{}}
	for _, st := range stages {
		p.Stages = append(p.Stages, st.name)
	}
	for key, name := range map[string]string{"kernel": artifact.Kernel, "vmlinux": artifact.Vmlinux,
		"kernel_config": artifact.KernelConfig, "initramfs": artifact.Initramfs, "rootfs": artifact.Rootfs,
		"manifest": artifact.Manifest, "boot": artifact.Boot, "kata": artifact.KataDir} {
		p.Outputs[key] = filepath.Join(img.Output.Dir, name)
	}
	return p
}
