package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the probe that tests run inside cgroups: with
// probeEnv set it performs one network operation named by its arguments and
// exits with 0 (done), exitEPERM (refused with EPERM) or 1 (other error).
const (
	probeEnv  = "NETGUARD_PROBE"
	exitEPERM = 10
)

func TestMain(m *testing.M) {
	if os.Getenv(probeEnv) != "" {
		os.Exit(probeMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func probeMain(args []string) int {
	if len(args) > 0 && args[0] == "spawn" { // run the rest in a child: a grandchild of the test
		cmd := exec.Command(os.Args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	err := probe(args)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, unix.EPERM):
		fmt.Fprintln(os.Stderr, err)
		return exitEPERM
	default:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
}

// probe performs one operation:
//
//	connect tcp|udp|mptcp ADDR PORT   socket(2) and connect(2)
//	sendto ADDR PORT                  UDP sendto(2) on an unconnected socket
//	fastopen ADDR PORT                TCP sendto(2) with MSG_FASTOPEN
//	bind tcp|udp ADDR PORT            bind(2), and listen(2) for TCP
//	dial HOST:PORT                    net.Dial("tcp"), through the resolver
//	attach CGROUP PORT                Attach, then exit without Close
//	loop ADDR PORT N                  N connect+close, prints the nanoseconds taken
func probe(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("probe %q: too few arguments", args)
	}
	switch op := args[0]; {
	case op == "dial":
		c, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", args[1])
		if err == nil {
			c.Close()
		}
		return err
	case op == "attach" && len(args) == 3:
		p, err := strconv.ParseUint(args[2], 10, 16)
		if err != nil {
			return err
		}
		_, err = Attach(args[1], []uint16{uint16(p)})
		return err
	case op == "connect" && len(args) == 4:
		return withSocket(args[1], args[2], args[3], func(fd int, sa unix.Sockaddr) error { return unix.Connect(fd, sa) })
	case op == "sendto" && len(args) == 3:
		return withSocket("udp", args[1], args[2], func(fd int, sa unix.Sockaddr) error { return unix.Sendto(fd, []byte("x"), 0, sa) })
	case op == "fastopen" && len(args) == 3:
		return withSocket("tcp", args[1], args[2], func(fd int, sa unix.Sockaddr) error {
			return unix.Sendto(fd, []byte("x"), unix.MSG_FASTOPEN, sa)
		})
	case op == "bind" && len(args) == 4:
		return withSocket(args[1], args[2], args[3], func(fd int, sa unix.Sockaddr) error {
			if err := unix.Bind(fd, sa); err != nil || args[1] != "tcp" {
				return err
			}
			return unix.Listen(fd, 1)
		})
	case op == "loop" && len(args) == 4:
		return loop(args[1], args[2], args[3])
	}
	return fmt.Errorf("probe %q: unknown operation", args)
}

// withSocket opens a socket of proto for the family of addr and calls f
// with it and the socket address addr:port.
func withSocket(proto, addr, port string, f func(fd int, sa unix.Sockaddr) error) error {
	family, sa, err := sockaddr(addr, port)
	if err != nil {
		return err
	}
	typ, protocol := unix.SOCK_STREAM, 0
	switch proto {
	case "udp":
		typ = unix.SOCK_DGRAM
	case "mptcp":
		protocol = unix.IPPROTO_MPTCP
	case "tcp":
	default:
		return fmt.Errorf("unknown protocol %q", proto)
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, protocol)
	if err != nil {
		return fmt.Errorf("socket %s: %w", proto, err)
	}
	defer unix.Close(fd)
	// A blocking connect gives up after SO_SNDTIMEO.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		return err
	}
	if err := f(fd, sa); err != nil {
		return fmt.Errorf("%s %s port %s: %w", proto, addr, port, err)
	}
	return nil
}

// sockaddr gives an IPv4 address an AF_INET socket address and every other
// address, including IPv4-mapped IPv6, an AF_INET6 one.
func sockaddr(addr, port string) (int, unix.Sockaddr, error) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return 0, nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, nil, err
	}
	if a.Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(p), Addr: a.As4()}, nil
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: int(p), Addr: a.As16()}, nil
}

// loop connects to addr:port and closes n times, with SO_LINGER 0 so that
// no TIME_WAIT socket is left behind, and prints the nanoseconds taken.
func loop(addr, port, count string) error {
	n, err := strconv.Atoi(count)
	if err != nil {
		return err
	}
	family, sa, err := sockaddr(addr, port)
	if err != nil {
		return err
	}
	start := time.Now()
	for range n {
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := unix.Connect(fd, sa); err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1}); err != nil {
			unix.Close(fd)
			return err
		}
		unix.Close(fd)
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return nil
}
