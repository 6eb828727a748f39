package spec

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strings"

	"github.com/allox-os/allox/internal/manifest"
)

var (
	hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
	serialRE   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,20}$`)
	ifnameRE   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,15}$`)
)

// Limits imposed by the kernel and QEMU.
const (
	hostnameMax   = 64 // HOST_NAME_MAX
	btrfsLabelMax = 255
	fwCfgNameMax  = 55 // FW_CFG_MAX_FILE_PATH less the NUL
)

func (d *decoder) validateInit(in *Init) {
	if len(in.Hostname) > hostnameMax || !hostnameRE.MatchString(in.Hostname) {
		d.errorf("init.hostname", "Invalid hostname",
			"hostname %q must be up to 64 letters, digits and '-', in dot-separated labels that neither start nor end with '-'; for example %q.",
			in.Hostname, strings.ReplaceAll(sanitizeID(in.Hostname), "_", "-"))
	}
	d.validateStore(&in.Store)
	if in.Network != nil {
		d.validateNetwork(in.Network)
	}
	names := map[string]int{}
	for i, f := range in.FwCfg {
		key := fmt.Sprintf("init.fw_cfg.%d", i)
		d.validateFwCfg(key, f)
		if first, dup := names[f.Name]; dup {
			d.errorf(key+".name", "Duplicate fw_cfg block",
				"fw_cfg %q is already defined at %s; each blob can be copied to one file only.", f.Name, d.at(fmt.Sprintf("init.fw_cfg.%d", first)))
		} else {
			names[f.Name] = i
		}
	}
}

func (d *decoder) validateStore(s *manifest.Store) {
	const key = "init.workspace_store"
	if !serialRE.MatchString(s.Serial) {
		d.errorf(key+".serial", "Invalid disk serial",
			"serial %q must be 1 to 20 letters, digits, '.', '_' or '-' (a virtio-blk serial holds 20 bytes); for example %q.",
			s.Serial, truncate(sanitizeID(s.Serial), 20))
	}
	d.checkAbs(key+".mountpoint", "mountpoint", s.Mountpoint)
	if s.Mountpoint == "/" {
		d.errorf(key+".mountpoint", "Invalid store mountpoint", "The store cannot be mounted over the root; use a directory such as \"/var/lib/allox/workspaces\".")
	}
	if s.Label == "" || len(s.Label) > btrfsLabelMax {
		d.errorf(key+".label", "Invalid Btrfs label", "label must be 1 to %d bytes; got %d.", btrfsLabelMax, len(s.Label))
	}
	if s.FallbackSizeMiB <= 0 {
		d.errorf(key+".fallback_size_mib", "Invalid fallback size",
			"fallback_size_mib is the size of the RAM-backed store used when no disk is attached; it must be a positive number of MiB, e.g. 512. Got %d.", s.FallbackSizeMiB)
	}
}

func (d *decoder) validateNetwork(n *manifest.Network) {
	const key = "init.network"
	if !ifnameRE.MatchString(n.Interface) {
		d.errorf(key+".interface", "Invalid interface name",
			"interface %q must be 1 to 15 letters, digits, '.', '_' or '-', such as \"eth0\".", n.Interface)
	}
	p, err := netip.ParsePrefix(n.Address)
	if err != nil {
		hint := fmt.Sprintf("such as \"10.0.2.15/24\" (%v)", err)
		if a, aerr := netip.ParseAddr(n.Address); aerr == nil {
			bits := 64
			if a.Is4() {
				bits = 24
			}
			hint = fmt.Sprintf("add the prefix length, e.g. %q", netip.PrefixFrom(a, bits).String())
		}
		d.errorf(key+".address", "Invalid network address", "address must be the interface's address in CIDR notation; %s.", hint)
	} else if p.Bits() < p.Addr().BitLen()-1 && p.Addr() == p.Masked().Addr() {
		d.errorf(key+".address", "Invalid network address",
			"%s names the network, not an address in it; give the interface's own address, e.g. %q.", n.Address, netip.PrefixFrom(p.Addr().Next(), p.Bits()))
	}
	if n.Gateway == "" {
		return
	}
	gw, err := netip.ParseAddr(n.Gateway)
	switch {
	case err != nil:
		d.errorf(key+".gateway", "Invalid gateway", "gateway must be an IP address without a prefix length, e.g. \"10.0.2.2\". (%v)", err)
	case p.IsValid() && !p.Contains(gw):
		d.errorf(key+".gateway", "Gateway outside the network",
			"gateway %s is not in %s, so it cannot be reached; pick an address inside it such as %s.", gw, p.Masked(), p.Masked().Addr().Next())
	case p.IsValid() && gw == p.Addr():
		d.errorf(key+".gateway", "Gateway is the interface's own address", "gateway and address are both %s; set gateway to the router's address.", gw)
	}
}

func (d *decoder) validateFwCfg(key string, f manifest.FwCfg) {
	if !strings.HasPrefix(f.Name, "opt/") || len(f.Name) > fwCfgNameMax {
		d.errorf(key+".name", "Invalid fw_cfg name",
			"fw_cfg names given by the user must start with \"opt/\" and be at most %d bytes (QEMU's limit), e.g. \"opt/allox/rpc-token\"; got %q (%d bytes).",
			fwCfgNameMax, f.Name, len(f.Name))
	}
	d.checkAbs(key+".path", "path", f.Path)
}

// checkAbs checks that p is an absolute, clean path inside the guest.
func (d *decoder) checkAbs(key, field, p string) {
	switch {
	case !path.IsAbs(p):
		d.errorf(key, "Path is not absolute", "%s must be an absolute path in the guest; write %q.", field, path.Join("/", p))
	case path.Clean(p) != p:
		d.errorf(key, "Path is not clean", "%s %q has redundant parts; write %q.", field, p, path.Clean(p))
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
