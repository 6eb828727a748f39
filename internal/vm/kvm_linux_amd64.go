package vm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KVM ioctls and structures (linux/kvm.h, x86).
const (
	kvmGetAPIVersion    = 0xAE00
	kvmCreateVM         = 0xAE01
	kvmGetVcpuMmapSize  = 0xAE04
	kvmCreateVcpu       = 0xAE41
	kvmSetUserMemRegion = 0x4020AE46
	kvmRun              = 0xAE80
	kvmSetRegs          = 0x4090AE82
	kvmGetSregs         = 0x8138AE83
	kvmSetSregs         = 0x4138AE84

	kvmExitIO  = 2
	kvmExitHLT = 5
)

type kvmMemRegion struct {
	Slot, Flags                    uint32
	GuestPhys, Size, UserspaceAddr uint64
}

type kvmSegment struct {
	Base                                              uint64
	Limit                                             uint32
	Selector                                          uint16
	Type, Present, DPL, DB, S, L, G, AVL, Unusable, _ uint8
}

type kvmDtable struct {
	Base  uint64
	Limit uint16
	_     [3]uint16
}

type kvmSregs struct {
	CS, DS, ES, FS, GS, SS, TR, LDT         kvmSegment
	GDT, IDT                                kvmDtable
	CR0, CR2, CR3, CR4, CR8, EFER, APICBase uint64
	InterruptBitmap                         [4]uint64
}

type kvmRegs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP, R8, R9, R10, R11, R12, R13, R14, R15, RIP, RFLAGS uint64
}

// probeCode, run in 64-bit mode at probeRIP: mov rcx, 1e6; 1: dec rcx; jnz 1b; mov al, 0x42;
// out 0xe9, al; hlt.
var probeCode = []byte{
	0x48, 0xB9, 0x40, 0x42, 0x0F, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x48, 0xFF, 0xC9, 0x75, 0xFB,
	0xB0, 0x42, 0xE6, 0xE9, 0xF4,
}

const (
	probeMem = 0x200000
	probeRIP = 0x10000
)

// probeKVM runs a million-iteration loop in a 64-bit guest through the raw KVM API and fails if
// the guest does not report back within deadline. Opening /dev/kvm or creating a VM is not proof:
// both succeed on hosts whose KVM then runs a guest a thousand times too slowly to boot Linux.
func probeKVM(deadline time.Duration) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // vCPU ioctls stay on one thread; a hung KVM_RUN keeps only it
		defer runtime.UnlockOSThread()
		done <- runProbe()
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(deadline):
		return fmt.Errorf("a 1e6-iteration guest loop did not finish within %v (KVM is broken or far slower than hardware)", deadline)
	}
}

func ioctl(fd int, req, arg uintptr) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return r, e
	}
	return r, nil
}

func runProbe() error {
	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", err)
	}
	defer unix.Close(kvm)
	if v, err := ioctl(kvm, kvmGetAPIVersion, 0); err != nil || v != 12 {
		return fmt.Errorf("KVM_GET_API_VERSION = %d, %v (want 12)", v, err)
	}
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	defer unix.Close(int(vmfd))
	mem, err := unix.Mmap(-1, 0, probeMem, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mmap guest memory: %w", err)
	}
	defer unix.Munmap(mem)
	region := kvmMemRegion{Size: probeMem, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(int(vmfd), kvmSetUserMemRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %w", err)
	}
	// Identity-map the first 2 MiB: PML4 at 0x1000 → PDPT at 0x2000 → PD at 0x3000 (one large page).
	binary.LittleEndian.PutUint64(mem[0x1000:], 0x2000|3)
	binary.LittleEndian.PutUint64(mem[0x2000:], 0x3000|3)
	binary.LittleEndian.PutUint64(mem[0x3000:], 0x83)
	copy(mem[probeRIP:], probeCode)
	vcpu, err := ioctl(int(vmfd), kvmCreateVcpu, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	defer unix.Close(int(vcpu))
	return runVcpu(kvm, int(vcpu))
}

func runVcpu(kvm, vcpu int) error {
	size, err := ioctl(kvm, kvmGetVcpuMmapSize, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	run, err := unix.Mmap(vcpu, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap kvm_run: %w", err)
	}
	defer unix.Munmap(run)
	if err := enterLongMode(vcpu); err != nil {
		return err
	}
	var out []byte
	for range 8 {
		if _, err := ioctl(vcpu, kvmRun, 0); err != nil {
			return fmt.Errorf("KVM_RUN: %w", err)
		}
		switch reason := binary.LittleEndian.Uint32(run[8:]); reason {
		case kvmExitIO: // struct kvm_run.io at offset 32: direction, size, port, count, data_offset
			out = append(out, run[binary.LittleEndian.Uint64(run[40:])])
		case kvmExitHLT:
			if len(out) != 1 || out[0] != 0x42 {
				return fmt.Errorf("guest halted having written %x, want 42", out)
			}
			return nil
		default:
			return fmt.Errorf("unexpected KVM exit reason %d", reason)
		}
	}
	return errors.New("guest did not halt")
}

func enterLongMode(vcpu int) error {
	var s kvmSregs
	if _, err := ioctl(vcpu, kvmGetSregs, uintptr(unsafe.Pointer(&s))); err != nil {
		return fmt.Errorf("KVM_GET_SREGS: %w", err)
	}
	s.CR3 = 0x1000
	s.CR4 = 1 << 5                                            // PAE
	s.CR0 = 1<<0 | 1<<1 | 1<<4 | 1<<5 | 1<<16 | 1<<18 | 1<<31 // PE MP ET NE WP AM PG
	s.EFER = 1<<8 | 1<<10                                     // LME LMA
	code := kvmSegment{Limit: 0xffffffff, Selector: 8, Type: 11, Present: 1, S: 1, L: 1, G: 1}
	data := kvmSegment{Limit: 0xffffffff, Selector: 16, Type: 3, Present: 1, S: 1, DB: 1, G: 1}
	s.CS, s.DS, s.ES, s.FS, s.GS, s.SS = code, data, data, data, data, data
	if _, err := ioctl(vcpu, kvmSetSregs, uintptr(unsafe.Pointer(&s))); err != nil {
		return fmt.Errorf("KVM_SET_SREGS: %w", err)
	}
	regs := kvmRegs{RIP: probeRIP, RFLAGS: 2, RSP: probeMem}
	if _, err := ioctl(vcpu, kvmSetRegs, uintptr(unsafe.Pointer(&regs))); err != nil {
		return fmt.Errorf("KVM_SET_REGS: %w", err)
	}
	return nil
}
