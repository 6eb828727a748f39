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
	Name, Version string
	// File is the absolute path of the spec file. For a spec parsed from memory it is the base name
	// of the filename given to Parse, joined to its base directory.
	File     string
	Kernel   Kernel
	Init     Init
	Rootfs   Rootfs
	Services []Service // in spec order
	Kata     Kata
	Output   Output
}

// Kernel says which kernel source to build and how to configure it.
type Kernel struct {
	Source KernelSource
	// Base is "allnoconfig", "defconfig", "tinyconfig" or the absolute path of a base config file.
	Base string
	// Fragments are absolute paths of config fragments: each glob expanded and sorted, in glob
	// order, duplicates removed.
	Fragments []string
	Patches   string // absolute path of a quilt-style series file, "" if not given
	Allowlist string // absolute path, "" if not given
	Cmdline   []string
}

// Base config keywords: the kernel's own make targets.
const (
	BaseAllnoconfig = "allnoconfig"
	BaseDefconfig   = "defconfig"
	BaseTinyconfig  = "tinyconfig"
)

// KernelSource pins the kernel source tree. Exactly one of DebianPackage and Tarball is set.
type KernelSource struct {
	DebianPackage, Version string // both set, or neither
	Tarball                string // absolute path; exclusive with DebianPackage
	SHA256                 string // 64 lowercase hex digits
}

// Init is what the Go PID 1 needs besides the services.
type Init struct {
	Hostname string
	Store    manifest.Store
	Network  *manifest.Network // nil when the block is absent
	FwCfg    []manifest.FwCfg  // from fw_cfg "NAME" { path = ..., mode = "0600" } blocks
}

// Rootfs describes the Debian root filesystem.
type Rootfs struct {
	Suite      string   // default "bookworm"
	Packages   []string // sorted, deduplicated
	Filesystem string   // only "ext4" for now
	SizeMiB    int      // 0 = size automatically
}

// Service is one supervised process and, optionally, the Go package that builds its binary.
type Service struct {
	manifest.Service
	// Build is a Go package path relative to the module root, such as
	// "./services/workspace-daemon"; "" if the binary is already in the rootfs.
	Build string
}

// Kata holds the settings the Kata runtime configuration needs.
type Kata struct {
	BootMode     string // BootImage (default) or BootInitrd
	RootfsType   string // default "ext4"; equals Rootfs.Filesystem
	KernelParams []string
}

// Kata boot modes.
const (
	BootImage  = "image"
	BootInitrd = "initrd"
)

// Output says where artifacts go.
type Output struct {
	Dir string // absolute; default "out" next to the spec
}

// Defaults for attributes the spec may leave out.
const (
	DefaultSuite      = "bookworm"
	DefaultFilesystem = "ext4"
	DefaultRestart    = manifest.RestartOnFailure
	DefaultOutputDir  = "out"
)
