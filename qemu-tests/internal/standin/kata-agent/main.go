// Command kata-agent is the stand-in kata-agent of the tests (see package standin): NOT the real
// agent, which is Rust and can be neither built nor downloaded here. `--version` prints
// standin.Version; run, it prints a standin.Report as one line after standin.Marker and serves
// "report" and "crash" on TCP standin.Port.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/qemu-tests/internal/standin"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "--version" || os.Args[1] == "-v") {
		fmt.Println(standin.Version)
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kata-agent stand-in:", err)
		os.Exit(1)
	}
}

func run() error {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", standin.Port))
	if err != nil {
		return err
	}
	r, err := json.Marshal(report())
	if err != nil {
		return err
	}
	fmt.Printf("%s%s\n", standin.Marker, r)
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go serve(c)
	}
}

func serve(c net.Conn) {
	defer c.Close()
	cmd, _ := bufio.NewReader(c).ReadString('\n')
	switch strings.TrimSpace(cmd) {
	case "report":
		json.NewEncoder(c).Encode(report())
	case "crash":
		fmt.Fprintln(c, "crashing")
		c.Close()
		unix.Kill(os.Getpid(), unix.SIGKILL)
	default:
		fmt.Fprintf(c, "unknown command %q: report or crash\n", cmd)
	}
}

// report reads what the process got now (limits init applies right after exec are in place by
// the time a test asks).
func report() standin.Report {
	r := standin.Report{Argv: os.Args, Env: os.Environ(), PID: os.Getpid(), PPID: os.Getppid()}
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		r.Cgroup = strings.TrimSpace(string(b))
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		r.NoFileCur, r.NoFileMax = lim.Cur, lim.Max
	}
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		r.OOMScoreAdj = strings.TrimSpace(string(b))
	}
	r.ContainerControllers = containerControllers()
	return r
}

// containerControllers makes a cgroup at the root of the hierarchy, as the agent does for a
// container, and reads which controllers it has.
func containerControllers() string {
	dir := fmt.Sprintf("/sys/fs/cgroup/kata-standin-%d", os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "error: " + err.Error()
	}
	defer os.Remove(dir)
	b, err := os.ReadFile(dir + "/cgroup.controllers")
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}
