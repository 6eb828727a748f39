package boot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestExecutables(t *testing.T) {
	m := &manifest.Manifest{
		KataAgent: &manifest.KataAgent{Path: "/usr/bin/kata-agent"},
		Services: []manifest.Service{
			{Name: "a", Command: []string{"/usr/bin/a", "--flag"}},
			{Name: "sh", Command: []string{"sh", "-c", "true"}}, // found along PATH at its start: not read ahead
			{Name: "a2", Command: []string{"/usr/bin/a"}},
		},
	}
	if d := cmp.Diff([]string{"/usr/bin/kata-agent", "/usr/bin/a"}, Executables(m)); d != "" {
		t.Error(d)
	}
}

// resident counts the pages of f in the page cache (mincore of a mapping of it).
func resident(t *testing.T, f *os.File, size int) int {
	t.Helper()
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(size), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func TestReadaheadFillsThePageCache(t *testing.T) {
	sys := (&fake{}).sys(t)
	const size = 4 << 20
	p := filepath.Join(sys.Root, "usr/bin/daemon")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Written pages are dirty: sync them, then drop them from the cache.
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if n := resident(t, f, size); n > 0 {
		t.Skipf("%d pages still cached after FADV_DONTNEED (tmpfs keeps them): cannot see a readahead here", n)
	}
	if err := (Readahead{[]string{"/usr/bin/daemon"}}).Run(context.Background(), sys); err != nil {
		t.Fatal(err)
	}
	pages := size / os.Getpagesize()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := resident(t, f, size)
		if n == pages {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pages in the page cache 5 s after the readahead", n, pages)
		}
	}
}

func TestReadaheadNamesWhatItCouldNotRead(t *testing.T) {
	sys := (&fake{}).sys(t)
	write(t, sys.Root, "/usr/bin/present", "x")
	err := Readahead{[]string{"/usr/bin/present", "/usr/bin/absent"}}.Run(context.Background(), sys)
	if err == nil || !strings.Contains(err.Error(), "absent") || strings.Contains(err.Error(), "present") {
		t.Fatalf("Run = %v, want an error naming /usr/bin/absent alone", err)
	}
}
