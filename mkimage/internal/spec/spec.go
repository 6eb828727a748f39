// Package spec decodes and validates an Allox OS image spec: the HCL file (images/allox.hcl by
// default) that says which kernel, init configuration, root filesystem, services and Kata settings
// mkimage builds.
//
// Decoding is staged, as in LinuxKit: each block is checked against an explicit hcl.BodySchema
// (unknown names are rejected with a "did you mean" suggestion), attribute values are decoded to
// Go types, relative paths are resolved against the spec's directory, and finally semantic checks
// run over the typed Image. Every stage reports all of its problems as hcl.Diagnostics with the
// source range of the offending attribute; nothing stops at the first error.
package spec

import "github.com/allox-os/allox/internal/manifest"

// Image is a decoded, validated spec with every path made absolute.
type Image struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// File is the absolute path of the spec file. For a spec parsed from memory it is the base name
	// of the filename given to Parse, joined to its base directory.
	File     string    `json:"file"`
	Kernel   Kernel    `json:"kernel"`
	Init     Init      `json:"init"`
	Rootfs   Rootfs    `json:"rootfs"`
	Services []Service `json:"services"` // in spec order
	Kata     Kata      `json:"kata"`
	Output   Output    `json:"output"`
}

// Kernel says which kernel source to build and how to configure it.
type Kernel struct {
	Source KernelSource `json:"source"`
	// Base is "allnoconfig", "defconfig", "tinyconfig" or the absolute path of a base config file.
	Base string `json:"base"`
	// Fragments are absolute paths of config fragments: each glob expanded and sorted, in glob
	// order, duplicates removed.
	Fragments []string `json:"fragments"`
	Patches   string   `json:"patches"`   // absolute path of a quilt-style series file, "" if not given
	Allowlist string   `json:"allowlist"` // absolute path, "" if not given
	Cmdline   []string `json:"cmdline"`
	// KataParity, when set, holds the final config to Kata's own guest kernel, symbol by symbol.
	KataParity *KataParity `json:"kata_parity,omitempty"`
}

// KataParity names the list of symbols Kata's guest kernel requests and the allow-list of the ones
// we do not match (each with its reason). Both paths are absolute.
type KataParity struct {
	Symbols   string `json:"symbols"`
	Allowlist string `json:"allowlist"`
}

// Base config keywords: the kernel's own make targets.
const (
	BaseAllnoconfig = "allnoconfig"
	BaseDefconfig   = "defconfig"
	BaseTinyconfig  = "tinyconfig"
)

// KernelSource pins the kernel source tree. Exactly one of DebianPackage and Tarball is set.
type KernelSource struct {
	DebianPackage string `json:"debian_package"`
	Version       string `json:"version"` // both set, or neither
	Tarball       string `json:"tarball"` // absolute path; exclusive with DebianPackage
	SHA256        string `json:"sha256"`  // 64 lowercase hex digits
}

// Init is what the Go PID 1 needs besides the services.
type Init struct {
	Hostname string            `json:"hostname"`
	Store    manifest.Store    `json:"store"`
	Network  *manifest.Network `json:"network"` // nil when the block is absent
	FwCfg    []manifest.FwCfg  `json:"fw_cfg"`  // from fw_cfg "NAME" { path = ..., mode = "0600" } blocks
}

// Rootfs describes the Debian root filesystem.
type Rootfs struct {
	Suite      string   `json:"suite"`      // default "bookworm"
	Packages   []string `json:"packages"`   // sorted, deduplicated
	Filesystem string   `json:"filesystem"` // only "ext4" for now
	SizeMiB    int      `json:"size_mib"`   // 0 = size automatically
	// Verity puts a dm-verity hash tree in partition 2 and boots through it (Kata's measured rootfs,
	// kernel_verity_params); image mode only.
	Verity bool `json:"verity"`
	// Npm are packages of the npm registry laid into the image (the agents' CLIs), in spec order.
	Npm []NpmPackage `json:"npm,omitempty"`
}

// NpmPackage is one tarball of the npm registry, pinned by version and integrity, of which the
// files Bin names are installed as executables.
type NpmPackage struct {
	Name      string `json:"name"`      // the block's label, e.g. "codex"
	Package   string `json:"package"`   // the registry's name, e.g. "@openai/codex"
	Version   string `json:"version"`   // exact, e.g. "0.171.0-linux-x64"
	Integrity string `json:"integrity"` // the registry's dist.integrity, "sha512-" and base64
	// Bin maps a path in the image to a file of the package (relative to its package/ directory).
	Bin map[string]string `json:"bin"`
}

// Service is one supervised process and, optionally, the Go package that builds its binary.
type Service struct {
	manifest.Service
	// Build is a Go package path relative to the module root, such as
	// "./services/workspace-daemon"; "" if the binary is already in the rootfs.
	Build string `json:"build"`
	// Plugins are the optional daemon plugins linked into the binary built from Build, in spec
	// order, each one of KnownPlugins; mkimage builds with one tag per plugin (see PluginTag).
	Plugins []string `json:"plugins"`
	// Sandbox is the workspace daemon's sandbox block (nil when absent); Manifest renders it into
	// the daemon's command line.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
}

// Kata holds the settings the Kata runtime configuration needs.
type Kata struct {
	BootMode     string   `json:"boot_mode"`   // BootImage (default) or BootInitrd
	RootfsType   string   `json:"rootfs_type"` // default "ext4"; equals Rootfs.Filesystem
	KernelParams []string `json:"kernel_params"`
	// Nvdimm gives the image Kata's NVDIMM DAX header and leaves disable_image_nvdimm false, so
	// Kata attaches it as an NVDIMM (/dev/pmem0p1, mounted with dax). Image mode only; default false
	// (virtio-blk, /dev/vda1).
	Nvdimm bool `json:"nvdimm"`
	// EnableAnnotations are the hypervisor annotations pods may set (names after
	// io.katacontainers.config.hypervisor.): the drop-ins' enable_annotations and the containerd
	// handlers' pod_annotations. Default kata.DefaultEnableAnnotations; [] lets pods change nothing.
	EnableAnnotations []string `json:"enable_annotations"`
	// BlockDeviceDriver is block_device_driver, pinned in both drop-ins: "virtio-scsi" (Kata's
	// x86_64 default; the kernel needs SCSI, SCSI_VIRTIO and BLK_DEV_SD) or "virtio-blk" (it needs
	// VIRTIO_BLK). kata-check holds the kernel to it.
	BlockDeviceDriver string `json:"block_device_driver"`
	// RequireAgent says the image is for a Kata runtime: without a kata-agent in it the spec is
	// refused and `mkimage kata-check` fails; when false a missing agent is only a warning.
	RequireAgent bool `json:"require_agent"`
	// Agent puts a kata-agent at AgentPath (nil: none).
	Agent *KataAgent `json:"agent,omitempty"`
}

// AgentPath is where Kata's images have the agent and where mkimage puts it.
const AgentPath = "/usr/bin/kata-agent"

// KataAgent is the kata block's agent block: where the agent comes from (exactly one of Binary and
// FromImage, absolute paths) and init's restart budget for it.
type KataAgent struct {
	// Binary is a kata-agent executable, e.g. the one of a Kata release (/opt/kata/bin/kata-agent).
	Binary string `json:"binary,omitempty"`
	// FromImage is a Kata guest image whose /usr/bin/kata-agent is taken, read without mounting
	// it: kata-containers.img (MBR, ext4 partition 1, with or without the NVDIMM DAX header) or
	// kata-containers-initrd.img (a gzip or zstd compressed newc cpio).
	FromImage string `json:"from_image,omitempty"`
	// MaxRestarts is how often init restarts the agent after a failure before the next failure
	// powers the VM off (Kata's unit: FailureAction=poweroff, no restart, is 0).
	MaxRestarts int `json:"max_restarts"`
}

// DefaultAgentRestarts is max_restarts when the agent block leaves it out.
const DefaultAgentRestarts = 3

// MaxAgentRestarts bounds max_restarts: a crash loop must end in a power-off in reasonable time.
const MaxAgentRestarts = 100

// Kata boot modes.
const (
	BootImage  = "image"
	BootInitrd = "initrd"
)

// Output says where artifacts go.
type Output struct {
	Dir string `json:"dir"` // absolute; default "out" next to the spec
}

// Defaults for attributes the spec may leave out.
const (
	DefaultSuite      = "bookworm"
	DefaultFilesystem = "ext4"
	DefaultRestart    = manifest.RestartOnFailure
	DefaultOutputDir  = "out"
)
