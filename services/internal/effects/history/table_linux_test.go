package history

import (
	"errors"
	"io"
	"testing"
)

// TestTable: every declared syscall compiles into a BPF descriptor, and the
// filters name the arguments they mean.
func TestTable(t *testing.T) {
	m, err := tableByNr()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != len(syscalls) || len(m) == 0 {
		t.Fatalf("%d syscalls indexed of %d declared", len(m), len(syscalls))
	}
	for _, s := range syscalls {
		if _, err := s.desc(); err != nil {
			t.Error(err)
		}
	}
	for _, tc := range []struct {
		name  string
		arg   uint8
		mask  uint64
		strs  [nstr]uint8
		lens  [nstr]uint8
		indir uint8
	}{
		{name: "openat", arg: 3, mask: openWrite, strs: [nstr]uint8{2}},
		{name: "openat2", arg: 3, mask: openWrite, strs: [nstr]uint8{2}, indir: 1},
		{name: "mount", strs: [nstr]uint8{1, 2, 3}},
		{name: "sethostname", strs: [nstr]uint8{1}, lens: [nstr]uint8{2}},
		{name: "clone3", arg: 1, mask: cloneNew, indir: 1},
	} {
		d, err := syscallByName(tc.name).desc()
		if err != nil {
			t.Fatal(err)
		}
		if d.FilterArg != tc.arg || d.FilterMask != tc.mask || d.StrArg != tc.strs || d.LenArg != tc.lens || d.FilterIndirect != tc.indir {
			t.Errorf("%s: descriptor %+v", tc.name, d)
		}
	}
}

func TestDescErrors(t *testing.T) {
	for _, s := range []syscallSpec{
		sc(1, "toomany", "a,b,c,d,e,f,g"),
		sc(1, "strings", "*a,*b,*c,*d"),
		sc(1, "len", "*a#n"),
		sc(1, "filter", "a").only("b", 1),
	} {
		if _, err := s.desc(); err == nil {
			t.Errorf("%s: no error", s.name)
		}
	}
}

func TestStartNotCgroup(t *testing.T) {
	_, err := Start(t.TempDir(), io.Discard)
	if !errors.Is(err, ErrNotCgroup2) {
		t.Errorf("Start on a plain directory = %v; want ErrNotCgroup2", err)
	}
	if _, err := Start("/nonexistent/cgroup", io.Discard); err == nil {
		t.Error("Start on a missing path: no error")
	}
}

func TestResolveScope(t *testing.T) {
	mount := cgroup2Mount(t)
	cg := newCgroup(t, "scope", "sub")
	for _, tc := range []struct {
		path  string
		level uint32
	}{{mount, 0}, {cg, 1}, {cg + "/sub", 2}} {
		s, err := resolveScope(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if s.level != tc.level || s.id != cgroupID(t, tc.path) {
			t.Errorf("%s: %+v; want level %d, id %d", tc.path, s, tc.level, cgroupID(t, tc.path))
		}
	}
}
