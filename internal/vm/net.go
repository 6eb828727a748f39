package vm

import (
	"fmt"
	"net"
	"strings"
	"sync"
)

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // never hand the same free port to two VMs of this process
)

// resolveHostFwd copies m, replacing every host port 0 with a free port on 127.0.0.1.
func resolveHostFwd(m map[int]int) (map[int]int, error) {
	out := make(map[int]int, len(m))
	for guest, host := range m {
		if host == 0 {
			p, err := freePort()
			if err != nil {
				return nil, fmt.Errorf("host port for guest port %d: %w", guest, err)
			}
			host = p
		}
		out[guest] = host
	}
	return out, nil
}

// freePort asks the kernel for a free 127.0.0.1 port. QEMU binds it a moment later; a port taken
// in between makes QEMU fail with "Could not set up host forwarding rule".
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 32 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[p] {
			portsGiven[p] = true
			return p, nil
		}
	}
	return 0, fmt.Errorf("no unused free port on 127.0.0.1")
}

// shellQuote quotes s for a POSIX shell, leaving plain words as they are.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
