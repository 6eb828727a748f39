package entry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "kwe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestListenMakesPrivateSocket(t *testing.T) {
	base := shortDir(t)
	ln, path, err := Listen(filepath.Join(base, "e"), "sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, _ := os.Stat(path)
	dst, _ := os.Stat(filepath.Dir(path))
	if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
		t.Fatalf("socket %v, directory %v; want 0600 in 0700", st.Mode(), dst.Mode())
	}
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := PeerOf(s)
	if err != nil || p.PID != int32(os.Getpid()) || p.UID != uint32(os.Geteuid()) {
		t.Fatalf("peer %+v %v", p, err)
	}
}

// Attack: the entry directory is a symlink to a directory the attacker controls.
func TestSymlinkedDirectoryRefused(t *testing.T) {
	base := shortDir(t)
	real := filepath.Join(base, "real")
	os.Mkdir(real, 0o700)
	link := filepath.Join(base, "link")
	os.Symlink(real, link)
	if _, _, err := Listen(link, "sock"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("got %v, want a symlink refusal", err)
	}
	if _, _, err := Listen(filepath.Join(link, "sub"), "sock"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("parent symlink: got %v", err)
	}
}

// Attack: a directory other users may write to (they could swap the socket).
func TestWritableDirectoryRefused(t *testing.T) {
	base := shortDir(t)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	if _, _, err := Listen(filepath.Join(open, "e"), "sock"); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Fatalf("got %v", err)
	}
	loose := filepath.Join(base, "loose")
	os.Mkdir(loose, 0o755)
	if _, _, err := Listen(loose, "sock"); err == nil || !strings.Contains(err.Error(), "0700") {
		t.Fatalf("got %v", err)
	}
}

// Attack: a regular file or symlink planted where the socket goes.
func TestPlantedFileRefused(t *testing.T) {
	base := shortDir(t)
	dir := filepath.Join(base, "e")
	os.Mkdir(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "sock"), nil, 0o600)
	if _, _, err := Listen(dir, "sock"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("got %v", err)
	}
}

// A live daemon's socket is never taken over; a stale one is replaced.
func TestLiveSocketKeptStaleReplaced(t *testing.T) {
	base := shortDir(t)
	dir := filepath.Join(base, "e")
	ln, _, err := Listen(dir, "sock")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Listen(dir, "sock"); err == nil || !strings.Contains(err.Error(), "running daemon") {
		t.Fatalf("got %v", err)
	}
	ln.Close()
	ln2, _, err := Listen(dir, "sock")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln2.Close()
}

// Attack: the client is pointed at a symlink to another daemon's socket.
func TestDialRefusesSymlink(t *testing.T) {
	base := shortDir(t)
	ln, path, err := Listen(filepath.Join(base, "e"), "sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	link := filepath.Join(base, "l")
	os.Symlink(path, link)
	if _, err := Dial(link); err == nil {
		t.Fatal("dialled through a symlink")
	}
}
