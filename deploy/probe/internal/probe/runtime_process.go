package probe

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/deploy/probe/internal/spec"
)

// ProcessRuntime runs the appliance's workspace daemon directly on the host, one per DevBox, on a
// directory of a Btrfs store: a Worker Sandbox without the VM, for hosts (and tests) without
// QEMU. Its sandboxes outlive the Probe: a restarted Probe adopts them from their state files.
type ProcessRuntime struct {
	Daemon       string   // the allox-workspace-daemon binary
	Store        string   // a directory on Btrfs; each DevBox gets Store/<name>
	State        string   // the Probe's state directory (tokens, pid files)
	CgroupParent string   // cgroup parent of the daemons' groups; each gets <parent>-<name>
	Client       string   // the in-sandbox client bound into runs ("" binds none)
	Sockets      string   // parent of the daemons' session-socket directories (default State); keep it short: AF_UNIX paths are bounded
	Extra        []string // more daemon flags
}

type processState struct {
	Pid      int    `json:"pid"`
	Endpoint string `json:"endpoint"`
	Token    string `json:"token"`
}

var hostListening = regexp.MustCompile(`msg=listening .*listener=host addr=(\S+)`)

// Boot adopts the DevBox's daemon if one still runs, or starts one.
func (r *ProcessRuntime) Boot(ctx context.Context, d spec.DevBox) (Sandbox, error) {
	statePath := filepath.Join(r.State, "sandbox-"+d.Name+".json")
	if sb, err := adopt(statePath, r.Daemon); err == nil {
		return sb, nil
	}
	root := filepath.Join(r.Store, d.Name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	token := randomToken()
	tokenFile := filepath.Join(r.State, "token-"+d.Name)
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{"--root", root, "--listen", "127.0.0.1:0", "--listen-host", "127.0.0.1:0", "--token-file", tokenFile,
		"--cgroup-parent", r.CgroupParent + "-" + d.Name, "--session-sockets", filepath.Join(cmp.Or(r.Sockets, r.State), "s-"+d.Name),
		"--client", r.Client}, r.Extra...)
	cmd := exec.Command(r.Daemon, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group: a Probe's signal is not its
	// The daemon logs into a file, never into a pipe of the Probe: it outlives the Probe, and a
	// write to a closed pipe on stderr would kill it.
	logPath := filepath.Join(r.State, "sandbox-"+d.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	offset, _ := logf.Seek(0, io.SeekEnd)
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", r.Daemon, err)
	}
	addr := make(chan string, 1)
	stopTail := make(chan struct{})
	defer close(stopTail)
	go tailFor(logPath, offset, addr, stopTail)
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case a := <-addr:
		st := processState{Pid: cmd.Process.Pid, Endpoint: "http://" + a, Token: token}
		b, _ := json.Marshal(st)
		if err := os.WriteFile(statePath, b, 0o600); err != nil {
			cmd.Process.Kill()
			return nil, err
		}
		return &processSandbox{st: st, done: exited, statePath: statePath}, nil
	case <-exited:
		return nil, fmt.Errorf("%s exited before listening (see %s)", r.Daemon, logPath)
	case <-ctx.Done():
		cmd.Process.Kill()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not report its host listener in 60s", r.Daemon)
	}
}

// tailFor reads the log at path from offset until a line names the host listener.
func tailFor(path string, offset int64, addr chan<- string, stop <-chan struct{}) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	f.Seek(offset, io.SeekStart)
	r := bufio.NewReader(f)
	var line []byte
	for {
		chunk, err := r.ReadBytes('\n')
		line = append(line, chunk...)
		if err == nil {
			if m := hostListening.FindSubmatch(line); m != nil {
				addr <- string(m[1])
				return
			}
			line = line[:0]
			continue
		}
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// adopt takes over a daemon a previous Probe started, if it still runs.
func adopt(statePath, daemon string) (Sandbox, error) {
	b, err := os.ReadFile(statePath)
	if err != nil {
		return nil, err
	}
	var st processState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.Pid))
	if err != nil || !strings.HasPrefix(string(cmdline), daemon+"\x00") {
		return nil, errors.New("not running")
	}
	done, err := pidDone(st.Pid)
	if err != nil {
		return nil, err
	}
	return &processSandbox{st: st, done: done, statePath: statePath}, nil
}

// pidDone is closed when process pid (not necessarily a child of this process) has exited.
func pidDone(pid int) (<-chan struct{}, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				return
			}
		}
	}()
	return done, nil
}

type processSandbox struct {
	st        processState
	done      <-chan struct{}
	statePath string
}

func (s *processSandbox) Endpoint() string      { return s.st.Endpoint }
func (s *processSandbox) Token() string         { return s.st.Token }
func (s *processSandbox) Done() <-chan struct{} { return s.done }

// Stop ends the daemon with SIGTERM (it shuts down cleanly), SIGKILL after 20s.
func (s *processSandbox) Stop(ctx context.Context) error {
	os.Remove(s.statePath)
	syscall.Kill(s.st.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
	case <-time.After(20 * time.Second):
	}
	syscall.Kill(s.st.Pid, syscall.SIGKILL)
	<-s.done
	return nil
}

func randomToken() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
