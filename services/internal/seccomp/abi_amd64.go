package seccomp

import (
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data, the input of a seccomp filter.
const (
	dataNR   = 0 // int nr: the system call number
	dataArch = 4 // __u32 arch: AUDIT_ARCH_* of the calling convention
)

// x32Bit is __X32_SYSCALL_BIT: x32 calls share AUDIT_ARCH_X86_64 and are told apart by it.
const x32Bit = 0x40000000

var syscallNumbers = arch.X86_64.SyscallNames

// abiCheck refuses, with EPERM, every call that is not made through the x86_64 ABI: i386
// (int 0x80, another audit arch) and x32 (x86_64's arch with x32Bit in the number). It leaves
// the number in the accumulator.
func abiCheck() ([]bpf.Instruction, error) {
	deny := bpf.RetConstant{Val: errnoRet(unix.EPERM)}
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: dataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AUDIT_ARCH_X86_64, SkipTrue: 1},
		deny,
		bpf.LoadAbsolute{Off: dataNR, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
		deny,
	}, nil
}
