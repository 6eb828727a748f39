// Command probe is the attacker's tool of the guest's sandbox tests: the QEMU tests upload it into
// a run's current/ and run it there. Each call does one thing and prints one line: "ok" (with the
// result) or "errno=NAME". It uses raw syscalls only, so that it is small and static.
//
//	probe raw NR [ARG...]            one syscall; an ARG is a number, "buf" (a zeroed 4 KiB buffer)
//	                                 or "s:TEXT" (a NUL-terminated string)
//	probe connect tcp4|tcp6|udp4|udp6 IP PORT
//	probe bind tcp4|tcp6|udp4|udp6 IP PORT
//	probe sendto udp4|udp6 IP PORT
package main

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

func main() {
	if len(os.Args) < 2 {
		os.Stdout.WriteString("usage: probe raw|connect|bind|sendto ...\n")
		os.Exit(2)
	}
	var err error
	var res string
	switch os.Args[1] {
	case "raw":
		res, err = raw(os.Args[2:])
	case "connect", "bind", "sendto":
		res, err = sock(os.Args[1], os.Args[2:])
	default:
		os.Stdout.WriteString("unknown command " + os.Args[1] + "\n")
		os.Exit(2)
	}
	if errno, ok := err.(syscall.Errno); ok {
		os.Stdout.WriteString("errno=" + errnoName(errno) + "\n")
		return
	}
	if err != nil {
		os.Stdout.WriteString("error=" + err.Error() + "\n")
		os.Exit(2)
	}
	os.Stdout.WriteString("ok " + res + "\n")
}

func raw(args []string) (string, error) {
	if len(args) < 1 || len(args) > 7 {
		return "", syscall.EINVAL
	}
	nr, err := strconv.ParseUint(args[0], 0, 64)
	if err != nil {
		return "", err
	}
	var a [6]uintptr
	for i, s := range args[1:] {
		switch {
		case s == "buf":
			b := make([]byte, 4096)
			a[i] = uintptr(unsafe.Pointer(&b[0]))
		case strings.HasPrefix(s, "s:"):
			p, err := syscall.BytePtrFromString(s[2:])
			if err != nil {
				return "", err
			}
			a[i] = uintptr(unsafe.Pointer(p))
		default:
			v, err := strconv.ParseUint(s, 0, 64)
			if err != nil {
				return "", err
			}
			a[i] = uintptr(v)
		}
	}
	r, _, errno := syscall.Syscall6(uintptr(nr), a[0], a[1], a[2], a[3], a[4], a[5])
	if errno != 0 {
		return "", errno
	}
	return strconv.FormatUint(uint64(r), 10), nil
}

func sock(op string, args []string) (string, error) {
	if len(args) != 3 {
		return "", syscall.EINVAL
	}
	ip, err := netip.ParseAddr(args[1])
	if err != nil {
		return "", err
	}
	port, err := strconv.Atoi(args[2])
	if err != nil {
		return "", err
	}
	family, typ := syscall.AF_INET, syscall.SOCK_STREAM
	if strings.HasSuffix(args[0], "6") {
		family = syscall.AF_INET6
	}
	if strings.HasPrefix(args[0], "udp") {
		typ = syscall.SOCK_DGRAM
	}
	fd, err := syscall.Socket(family, typ, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	var sa syscall.Sockaddr
	if family == syscall.AF_INET {
		sa = &syscall.SockaddrInet4{Port: port, Addr: ip.Unmap().As4()}
	} else {
		sa = &syscall.SockaddrInet6{Port: port, Addr: ip.As16()}
	}
	switch op {
	case "connect":
		err = syscall.Connect(fd, sa)
	case "bind":
		err = syscall.Bind(fd, sa)
	case "sendto":
		err = syscall.Sendto(fd, []byte("x"), 0, sa)
	}
	return "", err
}

// errnoName is the symbolic name of the errnos the tests tell apart.
func errnoName(e syscall.Errno) string {
	names := map[syscall.Errno]string{
		syscall.EPERM: "EPERM", syscall.EACCES: "EACCES", syscall.ENOSYS: "ENOSYS", syscall.EINVAL: "EINVAL",
		syscall.EFAULT: "EFAULT", syscall.EBADF: "EBADF", syscall.ENOENT: "ENOENT", syscall.ECONNREFUSED: "ECONNREFUSED",
		syscall.EADDRINUSE: "EADDRINUSE", syscall.EAFNOSUPPORT: "EAFNOSUPPORT", syscall.ENETUNREACH: "ENETUNREACH",
		syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL", syscall.ENOTTY: "ENOTTY", syscall.EOPNOTSUPP: "EOPNOTSUPP",
	}
	if n, ok := names[e]; ok {
		return n
	}
	return strconv.Itoa(int(e))
}
