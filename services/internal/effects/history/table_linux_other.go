//go:build linux && !amd64

package history

// syscalls is empty: the BPF programs read x86-64 registers, so Start
// refuses with ErrUnsupportedArch.
var syscalls []syscallSpec
