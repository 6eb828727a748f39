package probe

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The Probe's own SSH listener broken behind its back — its socket shut down from outside the
// Probe (the test takes a duplicate of the Probe's descriptor with pidfd_getfd(2) and shuts it
// down, so that the Probe's accept(2) fails as when the socket is lost) — is the fault
// listener_lost: self-heal rebinds the same address, counts it, reports it to the Gateway, and a
// new login on the old address reaches the session.
func TestSSHListenerRebound(t *testing.T) {
	f, gwURL, h, sshAddr := alphaWithSSH(t)
	login := func() {
		c := sshLogin(t, f, gwURL, sshAddr, "alpha", "s1", "main+s1")
		defer c.Close()
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if out, err := s.CombinedOutput("echo in-the-sandbox"); err != nil || !strings.Contains(string(out), "in-the-sandbox") {
			t.Fatalf("exec through the Probe: %q %v", out, err)
		}
	}
	login()

	shutDownListener(t, h.p.cmd.Process.Pid, sshAddr)
	eventually(t, "the listener rebound", func() bool { return probeStatus(t, h).Heal["listener_lost recovered"] == 1 })
	login()
	var audit string
	eventually(t, "the fault in the Gateway's audit", func() bool {
		audit = runGatewayCLI(t, f, gwURL, "audit", "--limit", "1000")
		return strings.Contains(audit, "listener_lost: rebind succeeded")
	})
	if !strings.Contains(audit, `"object": "host/host-a"`) {
		t.Errorf("the listener's fault is not the host's in the audit:\n%s", audit)
	}
}

// shutDownListener shuts down the listening TCP socket on addr that process pid holds, through a
// duplicate of its descriptor (the same socket), and closes the duplicate.
func shutDownListener(t *testing.T, pid int, addr string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	inode := listeningInode(t, port)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	target := -1
	for _, e := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); l == "socket:["+inode+"]" {
			fmt.Sscan(e.Name(), &target)
		}
	}
	if target < 0 {
		t.Fatalf("no descriptor of process %d is the socket listening on %s (inode %s)", pid, addr, inode)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, target, 0)
	if err != nil {
		t.Fatalf("pidfd_getfd: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil {
		t.Fatalf("shutdown of the Probe's listener: %v", err)
	}
}

// listeningInode is the inode of the IPv4 socket listening on port, from /proc/net/tcp.
func listeningInode(t *testing.T, port string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscan(port, &p)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", p)) && f[3] == "0A" {
			return f[9]
		}
	}
	t.Fatalf("nothing listens on port %s in /proc/net/tcp", port)
	return ""
}
