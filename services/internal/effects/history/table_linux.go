package history

import (
	"fmt"
	"strings"
)

const (
	nargs = 6
	nstr  = 3
	// maxSyscall is the size of the BPF descs map (MAX_SYSCALL).
	maxSyscall = 512
)

// Filters on flag arguments.
const (
	// openWrite: O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND|__O_TMPFILE. An
	// open without any of them cannot change the file.
	openWrite = 0x1 | 0x2 | 0x40 | 0x200 | 0x400 | 0x400000
	// cloneNew: the CLONE_NEW* flags. Plain forks are process events.
	cloneNew = 0x7e020080
)

// syscallSpec says how one syscall is recorded and its arguments named.
type syscallSpec struct {
	nr   uint32
	name string
	// args names the arguments in order. A plain name is a 32-bit integer
	// (int, unsigned int, pid_t: sign-extended from the low half of the
	// register), "+name" a 64-bit one (long, size_t, loff_t), "*name" a
	// NUL-terminated string and "*name#len" a string whose length is the
	// argument len; "" is an argument not recorded (a pointer to a struct).
	args []string
	// filter names the argument whose value must have a bit of mask;
	// indirect: the value is the u64 at that user address.
	filter   string
	mask     uint64
	indirect bool
}

// sc declares a syscall; args is a comma-separated list in the form of
// syscallSpec.args.
func sc(nr uintptr, name, args string) syscallSpec {
	s := syscallSpec{nr: uint32(nr), name: name}
	if args != "" {
		s.args = strings.Split(args, ",")
	}
	return s
}

// only records the syscall only when argument arg has a bit of mask.
func (s syscallSpec) only(arg string, mask uint64) syscallSpec {
	s.filter, s.mask = arg, mask
	return s
}

// onlyAt is only for a u64 read from the user address in argument arg.
func (s syscallSpec) onlyAt(arg string, mask uint64) syscallSpec {
	s.filter, s.mask, s.indirect = arg, mask, true
	return s
}

// argName strips the markers from a declared argument.
func argName(a string) (name string, str bool, lenArg string) {
	if !strings.HasPrefix(a, "*") {
		return strings.TrimPrefix(a, "+"), false, ""
	}
	name, lenArg, _ = strings.Cut(a[1:], "#")
	return name, true, lenArg
}

func (s syscallSpec) index(name string) int {
	for i, a := range s.args {
		if n, _, _ := argName(a); n == name {
			return i
		}
	}
	return -1
}

// desc compiles s into the BPF map value.
func (s syscallSpec) desc() (historyDesc, error) {
	d := historyDesc{On: 1}
	if len(s.args) > nargs {
		return d, fmt.Errorf("BUG: syscall %s: %d arguments, at most %d", s.name, len(s.args), nargs)
	}
	k := 0
	for i, a := range s.args {
		_, str, lenArg := argName(a)
		if !str {
			continue
		}
		if k == nstr {
			return d, fmt.Errorf("BUG: syscall %s: more than %d string arguments", s.name, nstr)
		}
		d.StrArg[k] = uint8(i + 1)
		if lenArg != "" {
			j := s.index(lenArg)
			if j < 0 {
				return d, fmt.Errorf("BUG: syscall %s: length argument %q not declared", s.name, lenArg)
			}
			d.LenArg[k] = uint8(j + 1)
		}
		k++
	}
	if s.filter != "" {
		j := s.index(s.filter)
		if j < 0 {
			return d, fmt.Errorf("BUG: syscall %s: filter argument %q not declared", s.name, s.filter)
		}
		d.FilterArg, d.FilterMask = uint8(j+1), s.mask
		if s.indirect {
			d.FilterIndirect = 1
		}
	}
	return d, nil
}

// tableByNr indexes syscalls by number.
func tableByNr() (map[uint32]*syscallSpec, error) {
	m := make(map[uint32]*syscallSpec, len(syscalls))
	for i := range syscalls {
		s := &syscalls[i]
		if s.nr >= maxSyscall {
			return nil, fmt.Errorf("BUG: syscall %s number %d over %d", s.name, s.nr, maxSyscall)
		}
		if _, dup := m[s.nr]; dup {
			return nil, fmt.Errorf("BUG: syscall %s declared twice", s.name)
		}
		m[s.nr] = s
	}
	return m, nil
}
