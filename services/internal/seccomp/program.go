package seccomp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ErrUnsupportedArch is returned by Program on a GOARCH the filter is not written for.
var ErrUnsupportedArch = errors.New("seccomp: the filter is written for x86_64 (GOARCH=amd64) only")

// Program returns the compiled filter in the form bwrap --seccomp reads: an array of struct
// sock_filter (u16 code, u8 jt, u8 jf, u32 k, native byte order), as libseccomp's
// seccomp_export_bpf writes it. It is compiled once; every call returns the same bytes.
func Program() ([]byte, error) {
	p, err := compiled()
	if err != nil {
		return nil, err
	}
	return bytes.Clone(p), nil
}

var compiled = sync.OnceValues(func() ([]byte, error) { return compile(table) })

// compile turns a table into the program's bytes.
func compile(rules []Rule) ([]byte, error) {
	insts, err := assemble(rules)
	if err != nil {
		return nil, err
	}
	// NewVM checks what the kernel's loader checks first: every jump lands inside the
	// program, which ends in a return.
	if _, err := bpf.NewVM(insts); err != nil {
		return nil, fmt.Errorf("BUG: seccomp: the compiled program is invalid: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// assemble compiles the table: this package's ABI check, then each row compiled by
// go-seccomp-bpf on its own, then ALLOW.
//
// The library's program checks the audit arch too, but on a foreign arch it jumps to the
// default action, which is right for an allow list and wrong for this deny list: an i386 call
// (int 0x80) would be allowed whatever it is. So abiCheck comes first and refuses every call
// that is not x86_64's.
//
// Rows are compiled one at a time because go-seccomp-bpf v1.6.0 compiles several conditional
// rows wrongly: after testing one row's arguments it goes on to compare the next row's system
// call number with the argument still in the accumulator (so clone(CLONE_NEWNS) would pass
// once a rule on clone's CLONE_NEWUSER had been tested), and a jump of more than 255
// instructions comes out as a backward "ja" that the kernel rejects. Each row's body is
// therefore preceded by a load of the number, and is short.
func assemble(rules []Rule) ([]bpf.Instruction, error) {
	prog, err := abiCheck()
	if err != nil {
		return nil, err
	}
	var errs []error
	for i, r := range rules {
		if r.Action == Allow && r.validate() == nil {
			continue
		}
		body, err := compileRule(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %d (%s): %w", i, r.Syscall, err))
			continue
		}
		prog = append(prog, bpf.LoadAbsolute{Off: dataNR, Size: 4})
		prog = append(prog, body...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return append(prog, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}), nil
}

// libraryPrologue is the length of what go-seccomp-bpf puts before a short program's rules:
// load arch, jump to the end unless native, load nr, skip unless x32, return ENOSYS.
const libraryPrologue = 5

// compileRule compiles one row with the library and returns its body: the instructions
// between the library's prologue and its final return of the default action. The body's
// jumps to that final return then land just after it, on the next row.
func compileRule(r Rule) ([]bpf.Instruction, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	g := libseccomp.SyscallGroup{Action: libseccomp.Action(errnoRet(unix.EPERM))}
	if r.Action == NoSys {
		g.Action = libseccomp.Action(errnoRet(unix.ENOSYS))
	}
	if len(r.Args) == 0 {
		g.Names = []string{r.Syscall}
	} else {
		g.NamesWithCondtions = []libseccomp.NameWithConditions{{Name: r.Syscall, Conditions: conditions(r.Args)}}
	}
	policy := libseccomp.Policy{DefaultAction: libseccomp.ActionAllow, Syscalls: []libseccomp.SyscallGroup{g}}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	n := len(insts)
	if n < libraryPrologue+2 || insts[0] != (bpf.LoadAbsolute{Off: dataArch, Size: 4}) ||
		insts[2] != (bpf.LoadAbsolute{Off: dataNR, Size: 4}) ||
		insts[n-1] != (bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}) {
		return nil, fmt.Errorf("BUG: go-seccomp-bpf's program does not have the expected shape (prologue, rules, ALLOW): %v", insts)
	}
	if j, ok := insts[1].(bpf.JumpIf); !ok || j.Cond != bpf.JumpNotEqual || int(j.SkipTrue) != n-3 {
		return nil, fmt.Errorf("BUG: go-seccomp-bpf's arch check is not a short jump to its end: %v", insts[1])
	}
	body := insts[libraryPrologue : n-1]
	for _, in := range body {
		switch in.(type) {
		case bpf.JumpIf, bpf.LoadAbsolute, bpf.RetConstant:
		default: // a long jump, which the library gets wrong
			return nil, fmt.Errorf("BUG: go-seccomp-bpf's rule holds %T %v", in, in)
		}
	}
	return body, nil
}

func (r Rule) validate() error {
	if _, ok := syscallNumbers[r.Syscall]; !ok {
		return fmt.Errorf("no such system call on x86_64")
	}
	switch r.Action {
	case Deny, NoSys, Allow:
	default:
		return fmt.Errorf("unknown action %d", int(r.Action))
	}
	if r.Action == Allow && len(r.Args) > 0 {
		return fmt.Errorf("an Allow row compiles to nothing, so its conditions would mean nothing; drop them")
	}
	for _, a := range r.Args {
		switch {
		case a.Index < 0 || a.Index > 5:
			return fmt.Errorf("argument %d: must be 0 to 5", a.Index)
		case a.Op == Eq32 && a.Value > math.MaxUint32:
			return fmt.Errorf("arg%d: Eq32 value %#x has more than 32 bits", a.Index, a.Value)
		case a.Op != Eq32 && a.Op != AnyBit && a.Op != Ne:
			return fmt.Errorf("arg%d: unknown op %d", a.Index, int(a.Op))
		}
	}
	return nil
}

// conditions translates a row's conditions into the library's, which all must hold.
func conditions(args []Arg) libseccomp.ArgumentConditions {
	var cs libseccomp.ArgumentConditions
	for _, a := range args {
		i := uint32(a.Index)
		switch a.Op {
		case AnyBit:
			cs = append(cs, libseccomp.Condition{Argument: i, Operation: libseccomp.BitsSet, Value: a.Value})
		case Ne:
			cs = append(cs, libseccomp.Condition{Argument: i, Operation: libseccomp.NotEqual, Value: a.Value})
		case Eq32:
			cs = append(cs, eq32(i, uint32(a.Value))...)
		}
	}
	return cs
}

// eq32 says "the low 32 bits of argument i equal v" in the library's terms. Its Equal compares
// all 64 bits, so a caller could set high bits that the kernel then drops. Its bit tests look
// at each half separately and, given a value whose high half is zero, ignore the argument's
// high half: "no bit outside v is set" and "each bit of v is set" together are equality of the
// low halves.
func eq32(i, v uint32) []libseccomp.Condition {
	cs := []libseccomp.Condition{{Argument: i, Operation: libseccomp.BitsNotSet, Value: uint64(^v)}}
	for bit := uint32(1); bit != 0; bit <<= 1 {
		if v&bit != 0 {
			cs = append(cs, libseccomp.Condition{Argument: i, Operation: libseccomp.BitsSet, Value: uint64(bit)})
		}
	}
	return cs
}

// errnoRet is the filter's return value SECCOMP_RET_ERRNO with errno.
func errnoRet(errno unix.Errno) uint32 {
	return unix.SECCOMP_RET_ERRNO | uint32(errno)&unix.SECCOMP_RET_DATA
}
