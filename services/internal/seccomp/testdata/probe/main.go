// Command probe attacks the kernel from inside a sandbox, one system call per process, and
// prints "name errno" for each (errno 0: the call succeeded). The seccomp tests run it in bwrap
// with and without the filter. Arguments are chosen so that an unfiltered call fails harmlessly
// with another errno than EPERM (or succeeds harmlessly): only the filter answers EPERM.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

var dir = flag.String("dir", "", "a Btrfs directory for the btrfs-* probes")

func main() {
	flag.Parse()
	if flag.NArg() == 0 || flag.Arg(0) == "-list" {
		names := make([]string, 0, len(probes))
		for n := range probes {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Println(names)
		return
	}
	if flag.NArg() == 1 {
		p, ok := probes[flag.Arg(0)]
		if !ok {
			fmt.Fprintf(os.Stderr, "probe: no probe %q\n", flag.Arg(0))
			os.Exit(2)
		}
		fmt.Printf("%s %d\n", flag.Arg(0), uintptr(p()))
		return
	}
	// One process per probe: an unfiltered probe may change its own process (unshare,
	// personality) and must not change the next.
	for _, name := range flag.Args() {
		var out bytes.Buffer
		cmd := exec.Command("/proc/self/exe", "-dir="+*dir, name)
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Printf("%s failed:%v\n", name, err)
			continue
		}
		io.Copy(os.Stdout, &out)
	}
}

func raw(nr uintptr, args ...uintptr) unix.Errno {
	var a [6]uintptr
	copy(a[:], args)
	_, _, errno := unix.RawSyscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	return errno
}

func str(s string) uintptr {
	b, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(b))
}

func ptr[T any](v *T) uintptr { return uintptr(unsafe.Pointer(v)) }

const (
	neg1    = ^uintptr(0)
	atFDCWD = ^uintptr(99) // -100
	x32     = 0x40000000
	none    = "/allox-probe-no-such-path"
	sigOK   = unix.CLONE_SIGHAND // without CLONE_VM: clone fails with EINVAL before any process exists
)

var probes = map[string]func() unix.Errno{
	"bpf":             func() unix.Errno { return raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0) },
	"perf_event_open": func() unix.Errno { return raw(unix.SYS_PERF_EVENT_OPEN, 0, 0, neg1, neg1, 0) },
	"kexec_load":      func() unix.Errno { return raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xffff0000) },
	"kexec_file_load": func() unix.Errno { return raw(unix.SYS_KEXEC_FILE_LOAD, neg1, neg1, 0, 0, 0xffff) },
	"init_module":     func() unix.Errno { return raw(unix.SYS_INIT_MODULE, 0, 0, str("")) },
	"finit_module":    func() unix.Errno { return raw(unix.SYS_FINIT_MODULE, neg1, str(""), 0) },
	"delete_module":   func() unix.Errno { return raw(unix.SYS_DELETE_MODULE, str("allox_probe_none"), unix.O_NONBLOCK) },
	"create_module":   func() unix.Errno { return raw(unix.SYS_CREATE_MODULE, 0, 0) },
	"get_kernel_syms": func() unix.Errno { return raw(unix.SYS_GET_KERNEL_SYMS, 0) },
	"query_module":    func() unix.Errno { return raw(unix.SYS_QUERY_MODULE, 0, 0, 0, 0, 0) },
	"uselib":          func() unix.Errno { return raw(unix.SYS_USELIB, str(none)) },
	"_sysctl":         func() unix.Errno { return raw(unix.SYS__SYSCTL, 0) },
	"lookup_dcookie":  func() unix.Errno { return raw(unix.SYS_LOOKUP_DCOOKIE, 0, 0, 0) },
	"syslog":          func() unix.Errno { return raw(unix.SYS_SYSLOG, unix.SYSLOG_ACTION_SIZE_BUFFER, 0, 0) },
	"kcmp": func() unix.Errno {
		pid := uintptr(unix.Getpid())
		return raw(unix.SYS_KCMP, pid, pid, 0xff, 0, 0)
	},
	"userfaultfd":       func() unix.Errno { return raw(unix.SYS_USERFAULTFD, 0xffff0000) },
	"io_uring_setup":    func() unix.Errno { var p [120]byte; return raw(unix.SYS_IO_URING_SETUP, 0, ptr(&p)) },
	"io_uring_enter":    func() unix.Errno { return raw(unix.SYS_IO_URING_ENTER, neg1, 0, 0, 0, 0, 0) },
	"io_uring_register": func() unix.Errno { return raw(unix.SYS_IO_URING_REGISTER, neg1, 0, 0, 0) },
	"open_by_handle_at": func() unix.Errno { return raw(unix.SYS_OPEN_BY_HANDLE_AT, neg1, 0, 0) },
	"name_to_handle_at": func() unix.Errno { return raw(unix.SYS_NAME_TO_HANDLE_AT, atFDCWD, str("/"), 0, 0, 0) },
	"add_key":           func() unix.Errno { return raw(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0) },
	"request_key":       func() unix.Errno { return raw(unix.SYS_REQUEST_KEY, 0, 0, 0, 0) },
	"keyctl":            func() unix.Errno { return raw(unix.SYS_KEYCTL, 0xffff, 0, 0, 0, 0) },
	"mount":             func() unix.Errno { return raw(unix.SYS_MOUNT, 0, 0, 0, 0, 0) },
	"umount2":           func() unix.Errno { return raw(unix.SYS_UMOUNT2, str(none), 0) },
	"pivot_root":        func() unix.Errno { return raw(unix.SYS_PIVOT_ROOT, str(none), str(none)) },
	"move_mount":        func() unix.Errno { return raw(unix.SYS_MOVE_MOUNT, neg1, str(none), neg1, str(none), 0) },
	"open_tree":         func() unix.Errno { return raw(unix.SYS_OPEN_TREE, neg1, str(none), 0) },
	"fsopen":            func() unix.Errno { return raw(unix.SYS_FSOPEN, str("allox_probe_none"), 0) },
	"fsconfig":          func() unix.Errno { return raw(unix.SYS_FSCONFIG, neg1, 0, 0, 0, 0) },
	"fsmount":           func() unix.Errno { return raw(unix.SYS_FSMOUNT, neg1, 0, 0) },
	"fspick":            func() unix.Errno { return raw(unix.SYS_FSPICK, neg1, str(none), 0) },
	"mount_setattr":     func() unix.Errno { return raw(unix.SYS_MOUNT_SETATTR, neg1, str(none), 0, 0, 0) },
	"reboot":            func() unix.Errno { return raw(unix.SYS_REBOOT, 0, 0, 0, 0) }, // wrong magic: EINVAL
	"swapon":            func() unix.Errno { return raw(unix.SYS_SWAPON, str(none), 0) },
	"swapoff":           func() unix.Errno { return raw(unix.SYS_SWAPOFF, str(none)) },
	"acct":              func() unix.Errno { return raw(unix.SYS_ACCT, str(none)) },
	"quotactl":          func() unix.Errno { return raw(unix.SYS_QUOTACTL, 0, str(none), 0, 0) },
	"quotactl_fd":       func() unix.Errno { return raw(unix.SYS_QUOTACTL_FD, neg1, 0, 0, 0) },
	"nfsservctl":        func() unix.Errno { return raw(unix.SYS_NFSSERVCTL, 0, 0, 0) },
	"vhangup":           func() unix.Errno { return raw(unix.SYS_VHANGUP) },            // no controlling terminal: a no-op
	"settimeofday":      func() unix.Errno { return raw(unix.SYS_SETTIMEOFDAY, 0, 0) }, // nothing to set: a no-op
	"clock_settime": func() unix.Errno {
		var ts unix.Timespec
		return raw(unix.SYS_CLOCK_SETTIME, unix.CLOCK_MONOTONIC, ptr(&ts)) // not settable: EINVAL
	},
	"clock_adjtime": func() unix.Errno { var tx unix.Timex; return raw(unix.SYS_CLOCK_ADJTIME, 1000, ptr(&tx)) },
	"adjtimex":      func() unix.Errno { return raw(unix.SYS_ADJTIMEX, 0) },
	"iopl":          func() unix.Errno { return raw(unix.SYS_IOPL, 4) },
	"ioperm":        func() unix.Errno { return raw(unix.SYS_IOPERM, 65536, 1, 1) },
	"setns":         func() unix.Errno { return raw(unix.SYS_SETNS, neg1, 0) },
	"clone3":        func() unix.Errno { return raw(unix.SYS_CLONE3, 0, 0) },
	"personality":   func() unix.Errno { return raw(unix.SYS_PERSONALITY, 0x0040000) }, // ADDR_NO_RANDOMIZE

	"socket/AF_VSOCK":           func() unix.Errno { return raw(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0) },
	"socket/AF_VSOCK-high-bits": func() unix.Errno { return raw(unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK, unix.SOCK_STREAM, 0) },
	"socketpair/AF_VSOCK": func() unix.Errno {
		var fds [2]int32
		return raw(unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM, 0, ptr(&fds))
	},

	// Other ABIs: getpid, which nothing else refuses.
	"abi/i386-int80": func() unix.Errno {
		r := int32(int80(20, 0, 0, 0)) // __NR_getpid in the i386 table
		if r < 0 {
			return unix.Errno(-r)
		}
		return 0
	},
	"abi/x32": func() unix.Errno { return raw(x32 | unix.SYS_GETPID) },

	// What a run does every day; these must succeed with the filter.
	"ok/socket-AF_INET6": func() unix.Errno { return raw(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, 0) },
	"ok/socket-AF_UNIX":  func() unix.Errno { return raw(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0) },
	"ok/tcp-loopback":    tcpLoopback,
	"ok/exec-true": func() unix.Errno {
		if err := exec.Command("/bin/true").Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return unix.EIO
		}
		return 0
	},
	"ok/personality-query": func() unix.Errno { return raw(unix.SYS_PERSONALITY, 0xffffffff) },
	"ok/unshare-files":     func() unix.Errno { return raw(unix.SYS_UNSHARE, unix.CLONE_FILES) },
	"ok/ioctl-pipe-FIONREAD": func() unix.Errno {
		var p [2]int
		if err := unix.Pipe(p[:]); err != nil {
			return err.(unix.Errno)
		}
		var n int32
		return raw(unix.SYS_IOCTL, uintptr(p[0]), unix.TIOCINQ, ptr(&n))
	},

	// Btrfs, on -dir: subvolumes "victim" (to snapshot and flag) and "victim-del" must exist.
	"btrfs/SUBVOL_CREATE-high-bits": func() unix.Errno {
		return btrfsIoctl(*dir, 0xffffffff_5000940e, ptr(volArgs("probe-subvol-hi", 0)))
	},
	"btrfs/SNAP_CREATE_V2-high-bits": func() unix.Errno {
		src, err := unix.Open(*dir+"/victim", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err.(unix.Errno)
		}
		a := volArgsV2("probe-snap-hi", int64(src))
		return btrfsIoctl(*dir, 0x1_50009417, ptr(a))
	},
	"btrfs/SUBVOL_SETFLAGS": func() unix.Errno {
		rdonly := uint64(1 << 1) // BTRFS_SUBVOL_RDONLY
		return btrfsIoctl(*dir+"/victim", 0x4008941a, ptr(&rdonly))
	},
	"btrfs/SNAP_DESTROY": func() unix.Errno { return btrfsIoctl(*dir, 0x5000940f, ptr(volArgs("victim-del", 0))) },
}

func init() {
	for _, ns := range []struct {
		name string
		flag uintptr
	}{
		{"CLONE_NEWUSER", unix.CLONE_NEWUSER}, {"CLONE_NEWNS", unix.CLONE_NEWNS}, {"CLONE_NEWNET", unix.CLONE_NEWNET},
		{"CLONE_NEWPID", unix.CLONE_NEWPID}, {"CLONE_NEWIPC", unix.CLONE_NEWIPC}, {"CLONE_NEWUTS", unix.CLONE_NEWUTS},
		{"CLONE_NEWCGROUP", unix.CLONE_NEWCGROUP}, {"CLONE_NEWTIME", unix.CLONE_NEWTIME},
	} {
		probes["clone/"+ns.name] = func() unix.Errno { return raw(unix.SYS_CLONE, ns.flag|sigOK, 0, 0, 0, 0) }
		probes["unshare/"+ns.name] = func() unix.Errno { return raw(unix.SYS_UNSHARE, ns.flag) }
	}
}

func int80(nr, a1, a2, a3 uintptr) uintptr

func tcpLoopback() unix.Errno {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return unix.EIO
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return unix.EIO
	}
	defer c.Close()
	if b, err := io.ReadAll(c); err != nil || string(b) != "hi" {
		fmt.Fprintln(os.Stderr, "tcp: read", b, err)
		return unix.EIO
	}
	return 0
}

// volArgs is struct btrfs_ioctl_vol_args: s64 fd, char name[4088].
func volArgs(name string, fd int64) *[4096]byte {
	var a [4096]byte
	*(*int64)(unsafe.Pointer(&a[0])) = fd
	copy(a[8:], name)
	return &a
}

// volArgsV2 is struct btrfs_ioctl_vol_args_v2: s64 fd, u64 transid, u64 flags, u64 unused[4],
// char name[4040].
func volArgsV2(name string, fd int64) *[4096]byte {
	var a [4096]byte
	*(*int64)(unsafe.Pointer(&a[0])) = fd
	copy(a[56:], name)
	return &a
}

func btrfsIoctl(path string, req, arg uintptr) unix.Errno {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err.(unix.Errno)
	}
	return raw(unix.SYS_IOCTL, uintptr(fd), req, arg)
}
