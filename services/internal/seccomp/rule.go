package seccomp

import (
	"fmt"
	"strings"
)

// Action is what the filter does with a call that matches a rule.
type Action int

const (
	// Deny fails the call with EPERM. It is the zero value, so that a row that forgets its
	// action denies.
	Deny Action = iota
	// NoSys fails the call with ENOSYS, the answer of a kernel without the call, so that libc
	// falls back to an older call that the filter can inspect.
	NoSys
	// Allow records a decision to leave a call allowed. It compiles to nothing: the filter's
	// default allows.
	Allow
)

func (a Action) String() string {
	switch a {
	case Deny:
		return "EPERM"
	case NoSys:
		return "ENOSYS"
	case Allow:
		return "allow"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Op is how a condition compares a system call argument with its value.
type Op int

const (
	// Eq32 holds when the low 32 bits of the argument equal the value. It is for arguments
	// that the kernel declares int or unsigned int (socket's family, ioctl's request): the
	// kernel ignores their high 32 bits, so a 64-bit comparison could be stepped around by
	// setting them.
	Eq32 Op = iota + 1
	// AnyBit holds when the argument has any bit of the value set (clone's and unshare's
	// flags).
	AnyBit
	// Ne holds when the argument differs from the value in any of its 64 bits. A caller that
	// sets high bits of a 32-bit argument only makes more of its calls match.
	Ne
)

// Arg is one condition on an argument of a system call.
type Arg struct {
	Index int    // argument position, 0 to 5
	Op    Op     // how the argument is compared
	Value uint64 // what it is compared with
	Name  string // the value's name in the kernel's headers, for people
}

func (a Arg) String() string {
	name := ""
	if a.Name != "" {
		name = " (" + a.Name + ")"
	}
	switch a.Op {
	case Eq32:
		return fmt.Sprintf("arg%d&0xffffffff == %#x%s", a.Index, a.Value, name)
	case AnyBit:
		return fmt.Sprintf("arg%d & %#x != 0%s", a.Index, a.Value, name)
	case Ne:
		return fmt.Sprintf("arg%d != %#x%s", a.Index, a.Value, name)
	}
	return fmt.Sprintf("arg%d Op(%d) %#x%s", a.Index, int(a.Op), a.Value, name)
}

// Rule is one row of the table: a system call, the conditions on its arguments under which
// the rule applies (all of them; none means every call), the action and why.
type Rule struct {
	Syscall string // name in the x86_64 system call table
	Args    []Arg
	Action  Action
	Reason  string
}

// When renders the rule's conditions, "always" when it has none.
func (r Rule) When() string {
	if len(r.Args) == 0 {
		return "always"
	}
	parts := make([]string, len(r.Args))
	for i, a := range r.Args {
		parts[i] = a.String()
	}
	return strings.Join(parts, " && ")
}

// Rules returns the table the filter is compiled from, in order.
func Rules() []Rule {
	out := make([]Rule, len(table))
	for i, r := range table {
		r.Args = append([]Arg(nil), r.Args...)
		out[i] = r
	}
	return out
}
