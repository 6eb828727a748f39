package seccomp

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite testdata/rules.md from Rules()")

// call is a system call as a seccomp filter sees it (struct seccomp_data).
type call struct {
	arch uint32
	nr   uint32
	args [6]uint64
}

func (c call) String() string {
	return fmt.Sprintf("arch=%#x nr=%d args=%#x", c.arch, c.nr, c.args)
}

func x86(name string, args ...uint64) call {
	c := call{arch: unix.AUDIT_ARCH_X86_64, nr: uint32(syscallNumbers[name])}
	copy(c.args[:], args)
	return c
}

// vm runs the program's bytes, as bwrap would hand them to the kernel, in x/net/bpf's
// interpreter.
type vm struct{ *bpf.VM }

func newVM(t *testing.T, prog []byte) vm {
	t.Helper()
	if len(prog)%8 != 0 {
		t.Fatalf("program is %d bytes, not a whole number of 8-byte sock_filter", len(prog))
	}
	raw := make([]bpf.RawInstruction, len(prog)/8)
	for i := range raw {
		b := prog[8*i:]
		raw[i] = bpf.RawInstruction{Op: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("program holds instructions x/net/bpf cannot decode")
	}
	v, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	return vm{v}
}

// run returns the filter's verdict. The interpreter loads words big-endian, the kernel in
// native order: each 32-bit word is stored big-endian where the kernel would read it.
func (v vm) run(t *testing.T, c call) uint32 {
	t.Helper()
	in := make([]byte, 64)
	binary.BigEndian.PutUint32(in[dataNR:], c.nr)
	binary.BigEndian.PutUint32(in[dataArch:], c.arch)
	for i, a := range c.args {
		binary.BigEndian.PutUint32(in[16+8*i:], uint32(a))       // low half, first in memory
		binary.BigEndian.PutUint32(in[16+8*i+4:], uint32(a>>32)) // high half
	}
	out, err := v.Run(in)
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	return uint32(out)
}

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retNoSys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// want is what the table means for c, read from the rows directly: the reference the compiled
// program is checked against.
func want(c call) uint32 {
	if c.arch != unix.AUDIT_ARCH_X86_64 || c.nr >= x32Bit {
		return retEPERM
	}
	for _, r := range table {
		if uint32(syscallNumbers[r.Syscall]) != c.nr || r.Action == Allow || !matches(r.Args, c) {
			continue
		}
		if r.Action == NoSys {
			return retNoSys
		}
		return retEPERM
	}
	return retAllow
}

func matches(args []Arg, c call) bool {
	for _, a := range args {
		v := c.args[a.Index]
		ok := false
		switch a.Op {
		case Eq32:
			ok = uint32(v) == uint32(a.Value)
		case AnyBit:
			ok = v&a.Value != 0
		case Ne:
			ok = v != a.Value
		}
		if !ok {
			return false
		}
	}
	return true
}

// calls are the probes: for each row, a call that matches it, the same with high bits set, and
// near misses; then calls a run makes every day, and the other ABIs.
func calls() []call {
	var cs []call
	for _, r := range table {
		c := x86(r.Syscall)
		for _, a := range r.Args {
			switch a.Op {
			case Ne:
				c.args[a.Index] = 0x0040000 // ADDR_NO_RANDOMIZE
			default:
				c.args[a.Index] |= a.Value
			}
		}
		cs = append(cs, c)
		for _, a := range r.Args {
			for _, v := range []uint64{c.args[a.Index] | 0xdeadbeef<<32, c.args[a.Index] ^ 1, c.args[a.Index] ^ 0x80000000, 0, a.Value} {
				d := c
				d.args[a.Index] = v
				cs = append(cs, d)
			}
		}
	}
	return append(cs,
		x86("getpid"), x86("read", 0, 0, 0), x86("execve"),
		x86("clone", sigchld), x86("clone", unix.CLONE_VM|unix.CLONE_VFORK|sigchld),
		x86("clone", unix.CLONE_THREAD|unix.CLONE_VM|unix.CLONE_SIGHAND|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SYSVSEM),
		x86("unshare", unix.CLONE_FILES), x86("socket", unix.AF_INET6, unix.SOCK_STREAM), x86("socket", unix.AF_UNIX),
		x86("ioctl", 0, unix.TIOCGWINSZ), x86("ioctl", 3, 0x81f8943c /* BTRFS_IOC_GET_SUBVOL_INFO, a read */),
		x86("personality", 0xffffffff), x86("personality", 0), x86("ptrace"), x86("clone3"),
		call{arch: unix.AUDIT_ARCH_I386, nr: 20 /* i386 getpid */},
		call{arch: unix.AUDIT_ARCH_I386, nr: 21 /* i386 mount */},
		call{arch: unix.AUDIT_ARCH_AARCH64, nr: 172},
		call{arch: unix.AUDIT_ARCH_X86_64, nr: x32Bit | unix.SYS_GETPID},
		call{arch: unix.AUDIT_ARCH_X86_64, nr: x32Bit | unix.SYS_MOUNT},
		call{arch: unix.AUDIT_ARCH_X86_64, nr: 0xffffffff},
	)
}

// TestProgramMeansTable runs the compiled program on every probe and checks its verdict
// against the table's meaning.
func TestProgramMeansTable(t *testing.T) {
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	v := newVM(t, prog)
	for _, c := range calls() {
		if got, want := v.run(t, c), want(c); got != want {
			t.Errorf("%v: filter returns %#x, the table means %#x", c, got, want)
		}
	}
}

// TestVerdicts pins what matters most, independently of want's reading of the table.
func TestVerdicts(t *testing.T) {
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	v := newVM(t, prog)
	for _, tc := range []struct {
		name string
		c    call
		want uint32
	}{
		{"bpf", x86("bpf", 5), retEPERM},
		{"mount", x86("mount"), retEPERM},
		{"i386 getpid", call{arch: unix.AUDIT_ARCH_I386, nr: 20}, retEPERM},
		{"x32 getpid", call{arch: unix.AUDIT_ARCH_X86_64, nr: x32Bit | unix.SYS_GETPID}, retEPERM},
		{"getpid", x86("getpid"), retAllow},
		{"clone3", x86("clone3"), retNoSys},
		{"fork", x86("clone", sigchld), retAllow},
		{"clone NEWUSER", x86("clone", unix.CLONE_NEWUSER|sigchld), retEPERM},
		{"unshare NEWNET", x86("unshare", unix.CLONE_NEWNET), retEPERM},
		{"unshare FILES", x86("unshare", unix.CLONE_FILES), retAllow},
		{"socket AF_INET6", x86("socket", unix.AF_INET6, unix.SOCK_STREAM), retAllow},
		{"socket AF_VSOCK", x86("socket", unix.AF_VSOCK, unix.SOCK_STREAM), retEPERM},
		{"socket AF_VSOCK high bits", x86("socket", 1<<32|unix.AF_VSOCK, unix.SOCK_STREAM), retEPERM},
		{"subvol create", x86("ioctl", 3, 0x5000940e), retEPERM},
		{"subvol create high bits", x86("ioctl", 3, 0xffffffff_5000940e), retEPERM},
		{"snapshot v2 high bits", x86("ioctl", 3, 0x1_50009417), retEPERM},
		{"TIOCINQ", x86("ioctl", 3, unix.TIOCINQ), retAllow},
		{"personality query", x86("personality", 0xffffffff), retAllow},
		{"personality ADDR_NO_RANDOMIZE", x86("personality", 0x0040000), retEPERM},
	} {
		if got := v.run(t, tc.c); got != tc.want {
			t.Errorf("%s (%v): filter returns %#x, want %#x", tc.name, tc.c, got, tc.want)
		}
	}
}

func TestBtrfsRequests(t *testing.T) {
	// Computed by hand from <linux/btrfs.h>: _IOW(0x94, nr, size) = 1<<30 | size<<16 | 0x94<<8 | nr,
	// with sizeof(struct btrfs_ioctl_vol_args) = sizeof(..._v2) = 4096 and sizeof(__u64) = 8.
	for _, tc := range []struct {
		name      string
		got, want uint64
	}{
		{"BTRFS_IOC_SNAP_CREATE", btrfsSnapCreate, 0x50009401},
		{"BTRFS_IOC_SUBVOL_CREATE", btrfsSubvolCreate, 0x5000940e},
		{"BTRFS_IOC_SNAP_DESTROY", btrfsSnapDestroy, 0x5000940f},
		{"BTRFS_IOC_SNAP_CREATE_V2", btrfsSnapCreateV2, 0x50009417},
		{"BTRFS_IOC_SUBVOL_CREATE_V2", btrfsSubvolCreateV2, 0x50009418},
		{"BTRFS_IOC_SUBVOL_SETFLAGS", btrfsSubvolSetflags, 0x4008941a},
		{"BTRFS_IOC_SNAP_DESTROY_V2", btrfsSnapDestroyV2, 0x5000943f},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
}

func TestProgramDeterministic(t *testing.T) {
	a, err := compile(table)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile(Rules())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := Program()
	if !bytes.Equal(a, b) || !bytes.Equal(a, c) {
		t.Fatal("two compilations of the table differ")
	}
	if n := len(a) / 8; n > unix.BPF_MAXINSNS {
		t.Fatalf("%d instructions, the kernel takes at most %d", n, unix.BPF_MAXINSNS)
	}
}

func TestCompileRejects(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{Syscall: "vm86"}, "no such system call on x86_64"},
		{Rule{Syscall: "ioctl", Args: []Arg{{Index: 6, Op: Eq32}}}, "must be 0 to 5"},
		{Rule{Syscall: "ioctl", Args: []Arg{{Index: 1, Op: Eq32, Value: 1 << 32}}}, "more than 32 bits"},
		{Rule{Syscall: "ioctl", Args: []Arg{{Index: 1}}}, "unknown op"},
		{Rule{Syscall: "ptrace", Action: Allow, Args: []Arg{{Index: 0, Op: Ne}}}, "compiles to nothing"},
	} {
		_, err := compile([]Rule{tc.rule})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("compile(%+v) = %v, want an error containing %q", tc.rule, err, tc.want)
		}
	}
}

// TestRulesGolden renders the table as the Markdown that documents it.
func TestRulesGolden(t *testing.T) {
	var b strings.Builder
	b.WriteString("<!-- Generated by: go test ./services/internal/seccomp -run TestRulesGolden -update -->\n\n")
	b.WriteString("| syscall | when | action | reason |\n|---|---|---|---|\n")
	for _, r := range Rules() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Syscall, strings.ReplaceAll(r.When(), "|", `\|`), r.Action, r.Reason)
	}
	path := filepath.Join("testdata", "rules.md")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if diff := cmp.Diff(string(golden), b.String()); diff != "" {
		t.Errorf("Rules() differs from %s (-golden +now); rerun with -update if intended:\n%s", path, diff)
	}
}

const sigchld = uint64(unix.SIGCHLD)
