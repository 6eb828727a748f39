package boot

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/allox-os/allox/internal/manifest"
)

// ReadManifest decodes the image manifest into Into.
type ReadManifest struct {
	Path string
	Into *manifest.Manifest
}

func (r ReadManifest) String() string { return "read manifest " + r.Path }

// Run fails on a missing or invalid manifest: without it init knows no store and no services.
func (r ReadManifest) Run(_ context.Context, sys *Sys) error {
	f, err := os.Open(sys.Path(r.Path))
	if err != nil {
		return fmt.Errorf("%w (mkimage writes it into the image; rebuild the image)", err)
	}
	defer f.Close()
	m, err := manifest.Decode(f)
	if err != nil {
		return err
	}
	*r.Into = *m
	return nil
}

// Hostname sets the kernel host name.
type Hostname struct{ Name string }

func (h Hostname) String() string { return "hostname " + h.Name }

// Run skips an empty name (the kernel default stays).
func (h Hostname) Run(_ context.Context, sys *Sys) error {
	if h.Name == "" {
		return fmt.Errorf("%w: the manifest names no hostname", ErrSkipped)
	}
	return sys.Sethostname(h.Name)
}

// LinkUp brings an interface up.
type LinkUp struct{ Name string }

func (l LinkUp) String() string { return "ip link set " + l.Name + " up" }

// Run sets the link up.
func (l LinkUp) Run(_ context.Context, sys *Sys) error { return sys.LinkUp(l.Name) }

// Network gives the named interface an address and, with a gateway, the default route.
type Network struct{ manifest.Network }

func (n Network) String() string {
	s := fmt.Sprintf("ip addr add %s dev %s", n.Address, n.Interface)
	if n.Gateway != "" {
		s += fmt.Sprintf("; ip route add default via %s dev %s", n.Gateway, n.Interface)
	}
	return s
}

// Run validates the manifest's addresses, then configures link, address and route.
func (n Network) Run(_ context.Context, sys *Sys) error {
	addr, err := netip.ParsePrefix(n.Address)
	if err != nil {
		return fmt.Errorf("network.address %q: want a CIDR such as 10.0.2.15/24: %w", n.Address, err)
	}
	var gw netip.Addr
	if n.Gateway != "" {
		if gw, err = netip.ParseAddr(n.Gateway); err != nil {
			return fmt.Errorf("network.gateway %q: want an IP address such as 10.0.2.2: %w", n.Gateway, err)
		}
	}
	if err := sys.LinkUp(n.Interface); err != nil {
		return err
	}
	if err := sys.AddrAdd(n.Interface, addr); err != nil {
		return fmt.Errorf("add address: %w", err)
	}
	if gw.IsValid() {
		if err := sys.DefaultRoute(n.Interface, gw); err != nil {
			return fmt.Errorf("add default route: %w", err)
		}
	}
	return nil
}
