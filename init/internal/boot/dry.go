package boot

import (
	"context"
	"net/netip"
)

// Dry returns a Sys rooted at root whose kernel effects succeed without doing anything, for
// running the whole init outside a VM: steps still create directories, links and files under
// root, and the store falls back to an image file that is never attached or formatted.
func Dry(root string) *Sys {
	return &Sys{
		Root:         root,
		Mount:        func(string, string, string, uintptr, string) error { return nil },
		Sethostname:  func(string) error { return nil },
		LinkUp:       func(string) error { return nil },
		AddrAdd:      func(string, netip.Prefix) error { return nil },
		DefaultRoute: func(string, netip.Addr) error { return nil },
		Mkfs:         func(context.Context, string, string, bool) error { return nil },
		Loop: func(string) (string, func() error, error) {
			return "/dev/loop-dry", func() error { return nil }, nil
		},
	}
}
