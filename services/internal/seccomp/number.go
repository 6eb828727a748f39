package seccomp

import "strconv"

// Number is the rule's system call number on this architecture (-1 if it has none here).
func (r Rule) Number() int {
	if n, ok := syscallNumbers[r.Syscall]; ok {
		return n
	}
	return -1
}

// String is the operator's name on the wire: "eq32", "any_bit" or "ne".
func (o Op) String() string {
	switch o {
	case Eq32:
		return "eq32"
	case AnyBit:
		return "any_bit"
	case Ne:
		return "ne"
	}
	return "op" + strconv.Itoa(int(o))
}
