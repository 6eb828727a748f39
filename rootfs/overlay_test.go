package rootfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/initramfs"
	"github.com/allox-os/allox/internal/manifest"
)

// mergedUsr is the shape of a Debian 12 userland after the busybox applets were installed.
func mergedUsr(t *testing.T) *initramfs.Tree {
	tr := &initramfs.Tree{}
	must(t, tr.AddSymlink("/bin", "usr/bin"))
	must(t, tr.AddSymlink("/sbin", "usr/sbin"))
	must(t, tr.AddFile("/usr/bin/busybox", 0o755, []byte("bb")))
	must(t, tr.AddSymlink("/usr/sbin/init", "/bin/busybox"))
	must(t, tr.AddSymlink("/etc/resolv.conf", "/run/systemd/resolve/stub-resolv.conf"))
	must(t, tr.AddDir("/proc", 0o555))
	return tr
}

func TestOverlayApply(t *testing.T) {
	initBin := filepath.Join(t.TempDir(), "init")
	must(t, os.WriteFile(initBin, []byte("go init"), 0o600))
	tr := mergedUsr(t)
	o := Overlay{
		Binaries:    []Binary{{Path: "/sbin/init", Source: initBin}, {Path: "/init", Source: initBin}},
		Manifest:    []byte(`{"version":1}`),
		Hostname:    "allox",
		Mountpoints: append(DefaultMountpoints, "/var/lib/allox/workspaces"),
	}
	if err := o.Apply(tr); err != nil {
		t.Fatal(err)
	}
	check := func(p string, ok func(initramfs.Entry) bool, what string) {
		t.Helper()
		e, found := tr.Lookup(p)
		if !found || !ok(e) {
			t.Errorf("%s = %+v (found %v), want %s", p, e, found, what)
		}
	}
	check("/usr/sbin/init", func(e initramfs.Entry) bool { return e.Mode == 0o755 && e.Source == initBin && e.Size == 7 }, "our init, replacing the busybox applet")
	check("/init", func(e initramfs.Entry) bool { return e.Source == initBin }, "our init")
	check(manifest.Path, func(e initramfs.Entry) bool { return string(e.Data) == `{"version":1}` && e.Mode == 0o644 }, "the manifest")
	check("/etc/hostname", func(e initramfs.Entry) bool { return string(e.Data) == "allox\n" }, "allox\\n")
	check("/etc/resolv.conf", func(e initramfs.Entry) bool { return e.Mode == 0o644 && e.Size == 0 }, "an empty regular file")
	check("/proc", func(e initramfs.Entry) bool { return e.Mode == fs.ModeDir|0o555 }, "the existing directory, untouched")
	check("/var/lib/allox/workspaces", initramfs.Entry.IsDir, "a directory")
	check("/usr/bin/sh", func(e initramfs.Entry) bool { return e.Link == "busybox" }, "a link to busybox")
}

func TestOverlayApplyErrors(t *testing.T) {
	tr := &initramfs.Tree{}
	must(t, tr.AddFile("/tmp", 0o644, nil))
	err := Overlay{
		Binaries:    []Binary{{Path: "relative/init", Source: "/nonexistent"}},
		Hostname:    "bad host",
		Mountpoints: []string{"/tmp"},
	}.Apply(tr)
	if err == nil {
		t.Fatal("Apply succeeded")
	}
	for _, want := range []string{
		`binaries[0]: path "relative/init" is relative`,
		`hostname "bad host"`,
		"mountpoints[0]: /tmp is a file, not a directory",
		"neither /bin/sh nor a /bin/busybox",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestOverlayAccounts checks that the runs' account is appended to /etc/passwd and /etc/group (from
// a file of the userland on disk, as the Debian tree has them), and that a file that already has
// the name or the id is left as it is.
func TestOverlayAccounts(t *testing.T) {
	tr := mergedUsr(t)
	passwd := filepath.Join(t.TempDir(), "passwd")
	must(t, os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"), 0o644))
	must(t, tr.Add(initramfs.Entry{Path: "/etc/passwd", Mode: 0o644, Source: passwd}))
	must(t, tr.AddFile("/etc/group", 0o644, []byte("root:x:0:\nbusy:x:2000:\n")))
	o := Overlay{Accounts: []Account{{Name: "allox-run", UID: 2000, GID: 2000, Comment: "Allox sandboxed runs"}}}
	if err := o.Apply(tr); err != nil {
		t.Fatal(err)
	}
	e, _ := tr.Lookup("/etc/passwd")
	want := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
		"allox-run:x:2000:2000:Allox sandboxed runs:/nonexistent:/usr/sbin/nologin\n"
	if string(e.Data) != want || e.Source != "" || e.Mode != 0o644 {
		t.Errorf("/etc/passwd = %q (source %q, mode %v), want %q", e.Data, e.Source, e.Mode, want)
	}
	if g, _ := tr.Lookup("/etc/group"); string(g.Data) != "root:x:0:\nbusy:x:2000:\n" {
		t.Errorf("/etc/group = %q: a group with the id is there, want it untouched", g.Data)
	}
	// Applying again changes nothing: the name is there now.
	if err := o.Apply(tr); err != nil {
		t.Fatal(err)
	}
	if e2, _ := tr.Lookup("/etc/passwd"); string(e2.Data) != want {
		t.Errorf("a second Apply changed /etc/passwd: %q", e2.Data)
	}
	if err := (Overlay{Accounts: o.Accounts}).Apply(mergedUsr(t)); err == nil || !strings.Contains(err.Error(), "/etc/passwd") {
		t.Errorf("Apply on a userland without /etc/passwd = %v, want an error naming it", err)
	}
}
