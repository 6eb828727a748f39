package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/internal/manifest"
)

// Binary is a host file placed in the image as a root-owned 0755 executable.
type Binary struct {
	Path   string // in the image, e.g. "/sbin/init" or "/usr/bin/allox-workspace-daemon"
	Source string // on the build host
}

// File is a data file placed in the image.
type File struct {
	Path string
	Data []byte
}

// Overlay is what Allox places over the Debian userland.
type Overlay struct {
	Binaries []Binary
	// Files are small read-only data files (0644), e.g. the system-effects plugin's hash pins.
	Files []File
	// Manifest is written to /etc/allox/manifest.json (0644); nil writes none.
	Manifest []byte
	// Hostname is written to /etc/hostname; empty leaves the file alone.
	Hostname string
	// Mountpoints are directories created (0755, root) where the tree has none yet.
	Mountpoints []string
	// Accounts are added to /etc/passwd and /etc/group (with their own group), unless an entry of
	// the same name or id is there: the sandboxed runs' identity has a name, so that the tools
	// agents run (ssh, git, pip) can look it up.
	Accounts []Account
}

// Account is a system account with no login: its home is /nonexistent, its shell nologin.
type Account struct {
	Name     string
	UID, GID int
	Comment  string
}

// DefaultMountpoints are the directories every guest mounts something on. With the root filesystem
// mounted read-only (Kata's image mode) they must exist in the image.
var DefaultMountpoints = []string{"/dev", "/proc", "/run", "/sys", "/tmp"}

// Apply places o over t. Every path is first resolved through the symlinked directories of t, so with a
// merged /usr "/sbin/init" lands in /usr/sbin/init, replacing what was there (busybox installs an init
// applet link). Apply also makes /etc/resolv.conf an empty regular file, as Kata requires, and links
// /bin/sh to busybox when the userland has no shell. It reports every problem, not just the first.
func (o Overlay) Apply(t *initramfs.Tree) error {
	var errs []error
	add := func(e initramfs.Entry, what string) {
		p, err := t.Resolve(e.Path)
		if err == nil {
			e.Path = p
			err = t.Set(e)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for i, b := range o.Binaries {
		add(initramfs.Entry{Path: b.Path, Mode: 0o755, Source: b.Source}, fmt.Sprintf("binaries[%d]", i))
	}
	for i, f := range o.Files {
		add(initramfs.Entry{Path: f.Path, Mode: 0o644, Data: append([]byte{}, f.Data...)}, fmt.Sprintf("files[%d]", i))
	}
	if o.Manifest != nil {
		add(initramfs.Entry{Path: manifest.Path, Mode: 0o644, Data: o.Manifest}, "manifest")
	}
	if o.Hostname != "" {
		if err := checkHostname(o.Hostname); err != nil {
			errs = append(errs, err)
		} else {
			add(initramfs.Entry{Path: "/etc/hostname", Mode: 0o644, Data: []byte(o.Hostname + "\n")}, "hostname")
		}
	}
	add(initramfs.Entry{Path: "/etc/resolv.conf", Mode: 0o644, Data: []byte{}}, "resolv.conf")
	for _, a := range o.Accounts {
		if err := addAccount(t, a); err != nil {
			errs = append(errs, fmt.Errorf("account %s: %w", a.Name, err))
		}
	}
	for i, m := range o.Mountpoints {
		if err := ensureDir(t, m); err != nil {
			errs = append(errs, fmt.Errorf("mountpoints[%d]: %w", i, err))
		}
	}
	if err := ensureShell(t); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func checkHostname(h string) error {
	if len(h) > 64 || strings.Trim(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") != "" {
		return fmt.Errorf("hostname %q: want at most 64 letters, digits, '-' and '.', e.g. \"allox\"", h)
	}
	return nil
}

func ensureDir(t *initramfs.Tree, p string) error {
	r, err := t.Resolve(p)
	if err != nil {
		return err
	}
	if e, ok := t.Lookup(r); ok {
		if !e.IsDir() {
			return fmt.Errorf("%s is a %s, not a directory", r, e.Kind())
		}
		return nil
	}
	return t.AddDir(r, 0o755)
}

// ensureShell links /bin/sh to busybox when the userland has no /bin/sh.
func ensureShell(t *initramfs.Tree) error {
	sh, err := t.Resolve("/bin/sh")
	if err != nil {
		return err
	}
	if _, ok := t.Lookup(sh); ok {
		return nil
	}
	bb, err := t.Resolve("/bin/busybox")
	if err != nil {
		return err
	}
	if e, ok := t.Lookup(bb); !ok || e.Mode&fs.ModeType != 0 {
		return errors.New("the userland has neither /bin/sh nor a /bin/busybox binary: add busybox or dash to the rootfs packages")
	}
	target := "/bin/busybox"
	if dirOf(sh) == dirOf(bb) {
		target = "busybox"
	}
	return t.AddSymlink(sh, target)
}

func dirOf(p string) string { return p[:strings.LastIndexByte(p, '/')+1] }

// addAccount appends a's lines to /etc/passwd and /etc/group, leaving a file that already has an
// entry of its name or id as it is.
func addAccount(t *initramfs.Tree, a Account) error {
	for _, l := range []struct{ file, id, line string }{
		{"/etc/passwd", fmt.Sprint(a.UID), fmt.Sprintf("%s:x:%d:%d:%s:/nonexistent:/usr/sbin/nologin", a.Name, a.UID, a.GID, a.Comment)},
		{"/etc/group", fmt.Sprint(a.GID), fmt.Sprintf("%s:x:%d:", a.Name, a.GID)},
	} {
		path, err := t.Resolve(l.file)
		if err != nil {
			return err
		}
		e, ok := t.Lookup(path)
		if !ok || e.Mode&fs.ModeType != 0 {
			return fmt.Errorf("%s: the userland has no such regular file", l.file)
		}
		data := e.Data
		if e.Source != "" {
			if data, err = os.ReadFile(e.Source); err != nil {
				return err
			}
		}
		if hasEntry(string(data), a.Name, l.id) {
			continue
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		e.Data, e.Source, e.Size = append(append([]byte{}, data...), l.line+"\n"...), "", 0
		if err := t.Set(e); err != nil {
			return err
		}
	}
	return nil
}

// hasEntry reports whether a passwd or group file has an entry named name or with the id id.
func hasEntry(file, name, id string) bool {
	for _, line := range strings.Split(file, "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && (f[0] == name || f[2] == id) {
			return true
		}
	}
	return false
}
