package netconf

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// inNewNetns moves the calling goroutine's thread into a fresh network namespace for good (the
// thread stays locked and dies with the goroutine), so the test touches only its own namespace.
func inNewNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace (CAP_SYS_ADMIN); run: sudo go test ./init/internal/netconf")
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatalf("unshare(CLONE_NEWNET): %v", err)
	}
}

func TestConfigureInNetns(t *testing.T) {
	inNewNetns(t)
	if err := LinkUp("lo"); err != nil {
		t.Fatalf("LinkUp(lo): %v", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if lo.Flags&net.FlagUp == 0 {
		t.Fatalf("lo flags = %v, want up", lo.Flags)
	}
	prefix := netip.MustParsePrefix("10.9.8.7/24")
	for range 2 { // the second add finds the address present and must succeed
		if err := AddrAdd("lo", prefix); err != nil {
			t.Fatalf("AddrAdd: %v", err)
		}
	}
	addrs, err := lo.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(addrsString(addrs), "10.9.8.7/24") {
		t.Fatalf("lo addresses = %v, want 10.9.8.7/24 among them", addrs)
	}
	gw := netip.MustParseAddr("10.9.8.1")
	for range 2 {
		if err := DefaultRoute("lo", gw); err != nil {
			t.Fatalf("DefaultRoute: %v", err)
		}
	}
	routes, err := os.ReadFile("/proc/thread-self/net/route")
	if err != nil {
		t.Fatal(err)
	}
	// Destination 00000000, gateway 10.9.8.1 in little-endian hex.
	if !strings.Contains(string(routes), "lo\t00000000\t0108090A") {
		t.Fatalf("no default route via 10.9.8.1 in:\n%s", routes)
	}
}

func TestMissingLink(t *testing.T) {
	inNewNetns(t)
	for name, err := range map[string]error{
		"LinkUp":       LinkUp("eth0"),
		"AddrAdd":      AddrAdd("eth0", netip.MustParsePrefix("10.0.2.15/24")),
		"DefaultRoute": DefaultRoute("eth0", netip.MustParseAddr("10.0.2.2")),
	} {
		if !errors.Is(err, ErrNoLink) {
			t.Errorf("%s(eth0) = %v, want ErrNoLink", name, err)
		}
	}
}

func addrsString(addrs []net.Addr) string {
	var s []string
	for _, a := range addrs {
		s = append(s, a.String())
	}
	return strings.Join(s, " ")
}

func TestAckParsesErrno(t *testing.T) {
	msg := make([]byte, 36)
	nativeEndian.PutUint32(msg[0:4], 36)
	nativeEndian.PutUint16(msg[4:6], unix.NLMSG_ERROR)
	errno := -int32(unix.ENODEV)
	nativeEndian.PutUint32(msg[16:20], uint32(errno))
	done, err := ack(msg)
	if !done || !errors.Is(err, unix.ENODEV) {
		t.Fatalf("ack = %v, %v; want true, ENODEV", done, err)
	}
	if done, err := ack(msg[:10]); done || err != nil {
		t.Fatalf("ack(short) = %v, %v; want false, nil", done, err)
	}
}
