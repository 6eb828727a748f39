// Package seccomp is the default seccomp filter of sandboxed runs: a deny table modelled on
// Docker's default profile, compiled into the classic-BPF program that bubblewrap's --seccomp
// option installs.
//
// The table (Rules) names each denied call, with conditions on its arguments where only some
// uses are dangerous (clone's namespace flags, AF_VSOCK sockets, the Btrfs ioctls that create or
// delete subvolumes), and says why. Everything else is allowed: the filter removes the kernel's
// most exposed and most privileged entry points, while the sandbox's other layers (no privilege,
// masked paths, a private mount tree) bound the rest. A denied call fails with EPERM, so that a
// run sees an ordinary error instead of being killed; clone3 fails with ENOSYS, so that libc
// falls back to clone(2), whose flags the filter can read.
//
// The program accepts only the x86_64 ABI: a call through the i386 ABI (int 0x80) or the x32 ABI
// (numbers with bit 0x40000000 set) fails with EPERM whatever it is, so that neither syscall
// table can be used to step around this one. Calls that exist only in those ABIs (vm86,
// vm86old, stime, ...) are refused that way and need no row.
package seccomp
