package baseline

import (
	"debug/elf"
	"fmt"
	"io"
	"os"

	"github.com/cavaliergopher/cpio"
)

// Busybox is where Debian's busybox-static package puts its binary.
const Busybox = "/bin/busybox"

// initScript is the baseline's PID 1. The archive holds no /dev/console (cpio.Writer cannot
// record device numbers), so the kernel starts it without stdio: it mounts devtmpfs and reattaches
// stdio to the console before printing anything.
const initScript = `#!/bin/busybox sh
/bin/busybox mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
/bin/busybox echo ` + ReadyMarker + `
exec /bin/busybox poweroff -f
`

// WriteInitramfs writes the baseline initramfs: WriteBusyboxInitramfs with the /init that prints
// ReadyMarker and powers off.
func WriteInitramfs(w io.Writer, busybox string) error {
	return WriteBusyboxInitramfs(w, busybox, initScript)
}

// WriteBusyboxInitramfs writes a newc cpio to w: init as /init, /bin/busybox (copied from busybox,
// which must be statically linked) and the empty mount points /dev, /proc, /sys. Entries are in a
// fixed order with zero timestamps and root ownership, so equal inputs give equal bytes. The
// archive has no /dev/console: init must mount devtmpfs and reopen its stdio (see initScript).
func WriteBusyboxInitramfs(w io.Writer, busybox, init string) error {
	if err := checkStatic(busybox); err != nil {
		return err
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("baseline initramfs: %w", err)
	}
	cw := cpio.NewWriter(w)
	entries := []struct {
		name string
		mode cpio.FileMode
		data []byte
	}{
		{"bin", cpio.TypeDir | 0o755, nil},
		{"bin/busybox", cpio.TypeReg | 0o755, bb},
		{"dev", cpio.TypeDir | 0o755, nil},
		{"init", cpio.TypeReg | 0o755, []byte(init)},
		{"proc", cpio.TypeDir | 0o555, nil},
		{"sys", cpio.TypeDir | 0o555, nil},
	}
	for _, e := range entries {
		links := 1
		if e.mode.IsDir() {
			links = 2
		}
		if err := cw.WriteHeader(&cpio.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Links: links}); err != nil {
			return fmt.Errorf("baseline initramfs %s: %w", e.name, err)
		}
		if _, err := cw.Write(e.data); err != nil {
			return fmt.Errorf("baseline initramfs %s: %w", e.name, err)
		}
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("baseline initramfs: %w", err)
	}
	return nil
}

// checkStatic fails unless path is an ELF executable without a program interpreter: the
// initramfs has no dynamic loader or libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("busybox %s: %w (install a static one: apt-get install busybox-static)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("busybox %s is dynamically linked: install busybox-static (apt-get install busybox-static)", path)
		}
	}
	return nil
}
