package netguard

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/allox-os/allox/internal/testenv"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// requireReal skips (or, with CI=true, fails) when the real prerequisites are
// missing: root, to load BPF and make cgroups, and a cgroup v2 mount. It
// returns the mount.
func requireReal(tb testing.TB) string {
	tb.Helper()
	testenv.Root(tb, "to load BPF and create cgroups", "./services/internal/netguard/")
	m, err := cgroup2Mount()
	if err != nil {
		testenv.Unavailable(tb, "needs cgroup v2: %v", err)
	}
	return m
}

// cgroup2Mount returns /sys/fs/cgroup on a pure cgroup v2 system and
// /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Mount() (string, error) {
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if err := unix.Statfs(m, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return m, nil
		}
	}
	return "", errors.New("no cgroup2 filesystem at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}

// cgroups is a test's cgroup tree below the cgroup2 mount:
//
//	base/guarded      the guard's attach point, like <mount>/allox
//	base/guarded/run  a run that exists before the guard is attached
//	base/open         an unguarded sibling
type cgroups struct {
	base, guarded, run, open string
}

func newCgroups(tb testing.TB) cgroups {
	tb.Helper()
	mount := requireReal(tb)
	name := strings.NewReplacer("/", "-", " ", "-").Replace(tb.Name())
	base := filepath.Join(mount, "netguard-test-"+name+"-"+strconv.Itoa(os.Getpid()))
	cg := cgroups{base: base, guarded: filepath.Join(base, "guarded"), run: filepath.Join(base, "guarded", "run"), open: filepath.Join(base, "open")}
	for _, d := range []string{cg.base, cg.guarded, cg.run, cg.open} {
		mkCgroup(tb, d)
	}
	return cg
}

// mkCgroup creates a cgroup, removed (after its subgroups) at cleanup.
func mkCgroup(tb testing.TB, dir string) {
	tb.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatalf("create cgroup: %v", err)
	}
	tb.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			tb.Errorf("remove cgroup: %v", err)
		}
	})
}

// outcome is how a probe ended.
type outcome struct {
	code   int
	stdout string
	stderr string
}

func (o outcome) String() string {
	switch o.code {
	case 0:
		return "succeeded"
	case exitEPERM:
		return "refused with EPERM: " + o.stderr
	}
	return fmt.Sprintf("failed (exit %d): %s", o.code, o.stderr)
}

// runProbe runs the probe args in a child process placed into the cgroup
// dir at clone time.
func runProbe(tb testing.TB, dir string, args ...string) outcome {
	tb.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer cg.Close()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &unix.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		tb.Fatalf("probe %q: %v", args, err)
	}
	return outcome{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: strings.TrimSpace(stderr.String())}
}

// refused fails the test unless the probe, run in dir, is refused with EPERM.
func refused(tb testing.TB, dir string, args ...string) {
	tb.Helper()
	if o := runProbe(tb, dir, args...); o.code != exitEPERM {
		tb.Errorf("attack %q from %s %s; want EPERM", args, filepath.Base(dir), o)
	}
}

// allowed fails the test unless the probe, run in dir, succeeds.
func allowed(tb testing.TB, dir string, args ...string) {
	tb.Helper()
	if o := runProbe(tb, dir, args...); o.code != 0 {
		tb.Errorf("%q from %s %s; want success", args, filepath.Base(dir), o)
	}
}

// listen listens for TCP on the port on every address, IPv4 and IPv6
// (dual-stack), and accepts and closes connections until cleanup.
func listen(tb testing.TB, port uint16) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

// freePort returns a port that is free for TCP and UDP on every address.
func freePort(tb testing.TB) uint16 {
	tb.Helper()
	for range 100 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			tb.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return uint16(port)
		}
	}
	tb.Fatal("no port free for both TCP and UDP")
	return 0
}

// listening returns a port with a dual-stack TCP listener on it.
func listening(tb testing.TB) uint16 {
	tb.Helper()
	return uint16(listen(tb, 0).Addr().(*net.TCPAddr).Port)
}

// ownAddrs returns the machine's addresses on its non-loopback interfaces
// that are up, one IPv4 and one IPv6 (not link-local) when it has them.
func ownAddrs(tb testing.TB) []netip.Addr {
	tb.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		tb.Fatal(err)
	}
	var v4, v6 []netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			tb.Fatal(err)
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, _ := netip.AddrFromSlice(n.IP)
			switch ip = ip.Unmap(); {
			case ip.IsLinkLocalUnicast() || ip.IsLoopback():
			case ip.Is4():
				v4 = append(v4, ip)
			default:
				v6 = append(v6, ip)
			}
		}
	}
	var own []netip.Addr
	if len(v4) > 0 {
		own = append(own, v4[0])
	}
	if len(v6) > 0 {
		own = append(own, v6[0])
	}
	return own
}

// attached returns how many programs are attached to dir at each of the
// guard's hooks; effective counts the programs in force there, inherited
// ones included.
func attached(tb testing.TB, dir string, effective bool) map[string]int {
	tb.Helper()
	f, err := os.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var flags uint32
	if effective {
		flags = unix.BPF_F_QUERY_EFFECTIVE
	}
	counts := make(map[string]int)
	for _, h := range hooks {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: h.attach, QueryFlags: flags})
		if err != nil {
			tb.Fatalf("query %s: %v", h.name, err)
		}
		counts[h.name] = len(res.Programs)
	}
	return counts
}

// counts is the attached result where every hook holds n programs.
func counts(n int) map[string]int {
	m := make(map[string]int)
	for _, h := range hooks {
		m[h.name] = n
	}
	return m
}
