package boot

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fake records every kernel effect a step asks for, as a shell-like line.
type fake struct {
	calls    []string
	failHost error
	noLink   map[string]bool
}

func (f *fake) sys(t *testing.T) *Sys {
	root := t.TempDir()
	rel := func(p string) string { return strings.TrimPrefix(p, root) }
	return &Sys{
		Root: root,
		Mount: func(src, target, fstype string, flags uintptr, data string) error {
			f.calls = append(f.calls, fmt.Sprintf("mount %s %s %s %v %s", rel(src), rel(target), fstype, flagNames(flags), data))
			return nil
		},
		Sethostname: func(name string) error {
			f.calls = append(f.calls, "hostname "+name)
			return f.failHost
		},
		LinkUp: func(name string) error {
			if f.noLink[name] {
				return fmt.Errorf("no such network interface: %s", name)
			}
			f.calls = append(f.calls, "link up "+name)
			return nil
		},
		AddrAdd: func(name string, p netip.Prefix) error {
			f.calls = append(f.calls, "addr "+p.String()+" "+name)
			return nil
		},
		DefaultRoute: func(name string, gw netip.Addr) error {
			f.calls = append(f.calls, "route default "+gw.String()+" "+name)
			return nil
		},
		Mkfs: func(_ context.Context, dev, label string, mixed bool) error {
			f.calls = append(f.calls, fmt.Sprintf("mkfs %s %s mixed=%v", rel(dev), label, mixed))
			return nil
		},
		Loop: func(file string) (string, func() error, error) {
			f.calls = append(f.calls, "loop "+rel(file))
			return "/dev/loop7", func() error { f.calls = append(f.calls, "release /dev/loop7"); return nil }, nil
		},
	}
}

// write creates root/path with content, making parents.
func write(t *testing.T, root, path, content string) {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
