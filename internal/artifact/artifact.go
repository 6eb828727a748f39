// Package artifact names the files mkimage writes into its output directory and describes how to
// boot them, so that the QEMU tests, the bench and `make boot` start the appliance the same way.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File names inside the output directory.
const (
	Kernel       = "bzImage"              // the kernel to boot
	Vmlinux      = "vmlinux"              // the uncompressed ELF kernel, with BTF
	KernelConfig = "kernel.config"        // the proven final .config
	Initramfs    = "initramfs.cpio.gz"    // initrd mode: the whole rootfs with /init
	Rootfs       = "rootfs.img"           // image mode: MBR disk, partition 1 ext4, /sbin/init
	Manifest     = "manifest.json"        // sha256 of every input and output
	Boot         = "boot.json"            // BootInfo
	VerityParams = "kernel_verity_params" // dm-verity images: Kata's kernel_verity_params, one line
	KataDir      = "kata"                 // Kata config.d drop-ins
	// Attestation is the signed in-toto statement (SLSA provenance) of the outputs, a DSSE envelope
	// on one line; written when the build is signed (mkimage attest), not listed in the manifest.
	Attestation = "attestation.intoto.jsonl"
)

// BootInfo tells a VM launcher how to boot the artifacts.
type BootInfo struct {
	// Cmdline is the kernel command line common to both modes (console, panic, ...).
	Cmdline []string `json:"cmdline"`
	// ImageCmdline is appended in image mode (root=/dev/vda1 ...). Initrd mode appends nothing.
	ImageCmdline []string `json:"image_cmdline"`
	// StoreSerial is the virtio serial of the workspace-store disk.
	StoreSerial string `json:"store_serial"`
	// RPCPort is the guest TCP port of the daemon's token-protected host listener (0: none).
	RPCPort int `json:"rpc_port"`
	// TokenFwCfg is the fw_cfg name through which the host passes the RPC bearer token.
	TokenFwCfg string `json:"token_fw_cfg"`
	// ReadyServices are the services whose ready markers mean the appliance is usable.
	ReadyServices []string `json:"ready_services"`
	// MemoryMiB is the guest memory the image needs (initrd mode holds the rootfs in RAM).
	MemoryMiB int `json:"memory_mib"`
	// KernelVerityParams is Kata's kernel_verity_params when the image's root is dm-verity protected
	// (then ImageCmdline boots through /dev/dm-0); empty otherwise.
	KernelVerityParams string `json:"kernel_verity_params,omitempty"`
	// Nvdimm says rootfs.img carries Kata's NVDIMM DAX header (MBR #1 and the PFN info block in its
	// first 2 MiB) and the drop-ins leave disable_image_nvdimm false: Kata attaches it as an NVDIMM,
	// root=/dev/pmem0p1 with rootflags=dax,... ImageCmdline stays the virtio-blk view (/dev/vda1),
	// which the same image also boots with.
	Nvdimm bool `json:"nvdimm"`
	// KataAgent is the kata-agent in the image and init's restart budget for it (nil: none).
	KataAgent *KataAgent `json:"kata_agent,omitempty"`
	// RequireAgent says the spec is for a Kata runtime (kata.require_agent): an image without an
	// agent fails `mkimage kata-check` instead of drawing a warning.
	RequireAgent bool `json:"require_agent,omitempty"`
}

// KataAgent is the image's kata-agent as a launcher sees it.
type KataAgent struct {
	Path        string `json:"path"`
	Version     string `json:"version"`
	MaxRestarts int    `json:"max_restarts"`
}

// ReadBootInfo reads dir/boot.json.
func ReadBootInfo(dir string) (*BootInfo, error) {
	b, err := os.ReadFile(filepath.Join(dir, Boot))
	if err != nil {
		return nil, fmt.Errorf("read boot info: %w (build the image first: make image)", err)
	}
	var bi BootInfo
	if err := json.Unmarshal(b, &bi); err != nil {
		return nil, fmt.Errorf("decode %s: %w", Boot, err)
	}
	return &bi, nil
}

// CacheDir is where expensive, deterministic work (the kernel build, the Debian userland, the
// baseline kernel) is cached by content hash, outside the checkout: $ALLOX_CACHE, or
// /var/cache/allox.
func CacheDir() string {
	if d := os.Getenv("ALLOX_CACHE"); d != "" {
		return d
	}
	return "/var/cache/allox"
}

// SHA256File returns the hex sha256 of a file, as manifest.json records every input and output.
func SHA256File(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
