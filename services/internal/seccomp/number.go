package seccomp

// Number is the rule's system call number on this architecture (-1 if it has none here).
func (r Rule) Number() int {
	if n, ok := syscallNumbers[r.Syscall]; ok {
		return n
	}
	return -1
}
