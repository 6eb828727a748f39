package probe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/internal/appliance"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// QEMURuntime boots the Allox appliance from a mkimage output directory under QEMU, as Kata
// starts it and as the QEMU tests boot it (internal/appliance, internal/vm): KVM when /dev/kvm
// works, TCG otherwise. Each DevBox gets its own store disk in State, its own token (fw_cfg) and
// a QMP socket for VM-level snapshots. QEMU is detached from the Probe (its own process group,
// console and stderr in files) and recorded in State/sandbox-<name>.json, so that a restarted
// Probe adopts the running VM instead of booting it again.
type QEMURuntime struct {
	Out     string                           // the mkimage output directory
	State   string                           // store disks, records, tokens, VM logs
	Sockets string                           // QMP sockets (short: AF_UNIX paths are bounded); default State
	Logf    func(format string, args ...any) // the VMs' console and QEMU's stderr
	Notef   func(format string, args ...any) // what the runtime decided: adoptions, stale records
	// GuestFwd forwards guest connections to vm.GuestFwdAddr:port to the host's 127.0.0.1:port2
	// (the agents' model endpoint, for one); restricted user networking reaches nothing else.
	GuestFwd map[int]int
	// TCGCPU is the -cpu model when QEMU emulates (no KVM), e.g. "max" as Kata's own machine
	// takes: the Bun-built agent CLIs (claude, opencode) need AVX2, which QEMU's default model
	// lacks (they die of SIGILL). Under KVM the guest has the host's CPU. "" keeps QEMU's default.
	TCGCPU string
}

// qemuRecord is what the Probe keeps of a running appliance VM, to adopt it after a restart.
type qemuRecord struct {
	Runtime       string `json:"runtime"` // "qemu"
	Pid           int    `json:"pid"`
	StartTime     uint64 `json:"start_time"`     // /proc/PID/stat's starttime: a reused pid has another
	CmdlineSHA256 string `json:"cmdline_sha256"` // of /proc/PID/cmdline (which holds the token: not kept)
	QMP           string `json:"qmp"`
	GuestPort     int    `json:"guest_port"` // the appliance's host listener in the guest
	HostPort      int    `json:"host_port"`  // its forward on 127.0.0.1
	TokenFile     string `json:"token_file"` // the token's reference (mode 0600), never the token
	BootID        string `json:"boot_id"`    // system.info's boot_id at boot
	Logs          string `json:"logs"`       // the VM's console and stderr
}

func (r *QEMURuntime) notef(format string, args ...any) {
	if r.Notef != nil {
		r.Notef(format, args...)
	}
}

func (r *QEMURuntime) recordPath(name string) string {
	return filepath.Join(r.State, "sandbox-"+name+".json")
}

// Boot adopts the DevBox's VM if a previous Probe left it running and it checks out, or boots
// the appliance and waits until its services are ready.
func (r *QEMURuntime) Boot(ctx context.Context, d spec.DevBox) (Sandbox, error) {
	sb, err := r.adopt(ctx, d.Name)
	if err == nil {
		r.notef("devbox %s: adopted its running VM (pid %d)", d.Name, sb.rec.Pid)
		return sb, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		r.notef("devbox %s: not adopting the recorded VM: %v", d.Name, err)
	}
	return r.boot(ctx, d)
}

func (r *QEMURuntime) boot(ctx context.Context, d spec.DevBox) (*qemuSandbox, error) {
	info, err := artifact.ReadBootInfo(r.Out)
	if err != nil {
		return nil, err
	}
	disk := filepath.Join(r.State, "workspace-"+d.Name+".img")
	if err := appliance.EnsureDisk(disk, 4<<30); err != nil {
		return nil, err
	}
	token := randomToken()
	tokenFile := filepath.Join(r.State, "token-"+d.Name)
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	logs := filepath.Join(r.State, "vm-"+d.Name)
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return nil, err
	}
	opt := appliance.Options(r.Out, info, appliance.Image, disk, token)
	if d.MemoryMiB > opt.MemoryMiB {
		opt.MemoryMiB = d.MemoryMiB
	}
	sockets := r.Sockets
	if sockets == "" {
		sockets = r.State
	}
	opt.QMP = filepath.Join(sockets, "qmp-"+d.Name+".sock")
	opt.DetachDir = logs
	opt.GuestFwd = r.GuestFwd
	if r.TCGCPU != "" && vm.Accel() != "kvm" {
		opt.ExtraArgs = append(opt.ExtraArgs, "-cpu", r.TCGCPU)
	}
	host := &vmHost{name: "probe-" + d.Name, logf: r.Logf}
	vctx, cancel := context.WithCancel(context.Background()) // the VM outlives the intent that booted it
	v, err := vm.Start(vctx, host, opt)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() { v.Wait(); close(done) }()
	rec := qemuRecord{Runtime: spec.RuntimeQEMU, Pid: v.Pid(), QMP: opt.QMP, GuestPort: info.RPCPort, HostPort: v.HostPort(info.RPCPort), TokenFile: tokenFile, Logs: logs}
	s := &qemuSandbox{rec: rec, token: token, done: done, dir: r.State, statePath: r.recordPath(d.Name),
		endpoint: endpointOf(rec.HostPort),
		kill: func() {
			v.Kill()
			cancel()
			<-done
			host.cleanup()
		}}
	rctx, rcancel := context.WithTimeout(ctx, vm.Scaled(120*time.Second))
	defer rcancel()
	if _, err := appliance.WaitReady(rctx, v, info); err != nil {
		s.kill()
		return nil, fmt.Errorf("appliance not ready (accel %s): %w", vm.Accel(), err)
	}
	si, err := s.info(rctx)
	if err == nil {
		s.rec.BootID = si.BootID
		s.rec.StartTime, s.rec.CmdlineSHA256, err = processIdentity(s.rec.Pid)
	}
	if err == nil {
		err = s.save()
	}
	if err != nil {
		s.kill()
		return nil, fmt.Errorf("recording the VM: %w", err)
	}
	return s, nil
}

func endpointOf(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }

// processIdentity is what tells process pid from a later one with the same pid: its start time
// and the hash of its command line.
func processIdentity(pid int) (uint64, string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	// comm may hold spaces and parentheses: the fields after it start after the last ')'.
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 20 {
		return 0, "", fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	start, err := strconv.ParseUint(fields[19], 10, 64) // field 22 of stat(5); fields[0] is field 3
	if err != nil {
		return 0, "", err
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, "", err
	}
	if len(cmdline) == 0 {
		// A zombie has none, and neither has a process for a moment in execve, after its parent
		// already saw the exec succeed: an identity read then would never match again.
		return 0, "", fmt.Errorf("/proc/%d/cmdline is empty (the process is exiting, or not yet through execve)", pid)
	}
	sum := sha256.Sum256(cmdline)
	return start, hex.EncodeToString(sum[:]), nil
}

// adopt takes over the VM recorded for name if it is the QEMU this Probe started (pid alive with
// the recorded start time and command line), its QMP answers, and its host listener answers
// system.info with the recorded token and boot id. A record that fails is stale: it is removed,
// and a VM that is ours but does not answer is killed (and said so) before a new boot.
func (r *QEMURuntime) adopt(ctx context.Context, name string) (*qemuSandbox, error) {
	path := r.recordPath(name)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec qemuRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Runtime != spec.RuntimeQEMU {
		return nil, errors.Join(fmt.Errorf("%s is not a qemu record (%v): left alone", path, err), os.ErrNotExist)
	}
	stale := func(why error) (*qemuSandbox, error) {
		os.Remove(path)
		return nil, fmt.Errorf("stale record %s: %w", path, why)
	}
	start, sum, err := processIdentity(rec.Pid)
	switch {
	case err != nil:
		return stale(fmt.Errorf("pid %d is gone", rec.Pid))
	case start != rec.StartTime || sum != rec.CmdlineSHA256:
		return stale(fmt.Errorf("pid %d is another process now (start time or command line differ)", rec.Pid))
	}
	done, err := pidDone(rec.Pid)
	if err != nil {
		return stale(err)
	}
	token, err := os.ReadFile(rec.TokenFile)
	s := &qemuSandbox{rec: rec, token: strings.TrimSpace(string(token)), done: done, dir: r.State, statePath: path, endpoint: endpointOf(rec.HostPort)}
	s.kill = func() {
		syscall.Kill(rec.Pid, syscall.SIGKILL)
		<-done
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err == nil {
		err = s.qmpRunning(cctx)
	}
	var si rpc.SystemInfo
	if err == nil {
		si, err = s.info(cctx)
	}
	if err == nil && si.BootID != rec.BootID {
		err = fmt.Errorf("boot id %s, recorded %s", si.BootID, rec.BootID)
	}
	if err != nil {
		s.kill()
		return stale(fmt.Errorf("VM pid %d is ours but does not check out (%v): killed it", rec.Pid, err))
	}
	return s, nil
}

// CleanStale removes the records whose VM is gone or no longer the QEMU that was recorded (the
// Probe's start); records of running VMs stay until their DevBox's boot intent adopts them.
func (r *QEMURuntime) CleanStale() []string {
	files, _ := filepath.Glob(filepath.Join(r.State, "sandbox-*.json"))
	var cleaned []string
	for _, f := range files {
		var rec qemuRecord
		if b, err := os.ReadFile(f); err != nil || json.Unmarshal(b, &rec) != nil || rec.Runtime != spec.RuntimeQEMU {
			continue
		}
		if start, sum, err := processIdentity(rec.Pid); err != nil || start != rec.StartTime || sum != rec.CmdlineSHA256 {
			os.Remove(f)
			cleaned = append(cleaned, f)
		}
	}
	return cleaned
}

type qemuSandbox struct {
	rec       qemuRecord
	token     string
	dir       string // where VM snapshots go
	statePath string
	done      <-chan struct{}
	kill      func()
	stopOnce  sync.Once

	mu       sync.Mutex
	endpoint string
}

func (s *qemuSandbox) Endpoint() string      { s.mu.Lock(); defer s.mu.Unlock(); return s.endpoint }
func (s *qemuSandbox) Token() string         { return s.token }
func (s *qemuSandbox) Done() <-chan struct{} { return s.done }

// Pid is QEMU's process id.
func (s *qemuSandbox) Pid() int { return s.rec.Pid }

func (s *qemuSandbox) save() error {
	s.mu.Lock()
	b, _ := json.MarshalIndent(s.rec, "", "  ")
	s.mu.Unlock()
	tmp := s.statePath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.statePath)
}

func (s *qemuSandbox) client(timeout time.Duration) *rpc.Client {
	return rpc.NewClient(s.Endpoint(), s.token, &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: timeout})
}

func (s *qemuSandbox) info(ctx context.Context) (rpc.SystemInfo, error) {
	var si rpc.SystemInfo
	err := s.client(10*time.Second).Call(ctx, rpc.ActionSystemInfo, nil, &si)
	return si, err
}

func (s *qemuSandbox) qmp(ctx context.Context, command string, args any) (json.RawMessage, error) {
	return vm.QMPCommand(ctx, s.rec.QMP, command, args)
}

// qmpStatus runs a QMP query whose answer has a "status" (query-status, query-migrate).
func (s *qemuSandbox) qmpStatus(ctx context.Context, query string) (string, error) {
	raw, err := s.qmp(ctx, query, nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("qmp %s: %w", query, err)
	}
	return st.Status, nil
}

func (s *qemuSandbox) qmpRunning(ctx context.Context) error {
	st, err := s.qmpStatus(ctx, "query-status")
	if err == nil && st != "running" {
		err = fmt.Errorf("qmp query-status: %q, want running", st)
	}
	return err
}

// Stop powers the guest off through its daemon (init's clean shutdown) and kills QEMU if it has
// not exited within a minute. The record goes first: a stopped VM is never adopted.
func (s *qemuSandbox) Stop(ctx context.Context) error {
	os.Remove(s.statePath)
	os.Remove(s.rec.TokenFile)
	s.client(10*time.Second).Call(ctx, rpc.ActionSystemPowerOff, nil, nil) // the guest may go down before it answers
	select {
	case <-s.done:
	case <-ctx.Done():
	case <-time.After(vm.Scaled(60 * time.Second)):
	}
	s.stopOnce.Do(s.kill)
	return nil
}

// hostForward is the host port QEMU's user network forwards to the appliance's host listener
// now (HMP "info usernet"), 0 when there is none.
func (s *qemuSandbox) hostForward(ctx context.Context) (int, error) {
	raw, err := s.qmp(ctx, "human-monitor-command", map[string]string{"command-line": "info usernet"})
	if err != nil {
		return 0, err
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(text, "\n") {
		// TCP[HOST_FORWARD]  FD  127.0.0.1 HOSTPORT  10.0.2.15 GUESTPORT  RECVQ SENDQ
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == "TCP[HOST_FORWARD]" && f[2] == "127.0.0.1" && f[5] == strconv.Itoa(s.rec.GuestPort) {
			return strconv.Atoi(f[3])
		}
	}
	return 0, nil
}

// Diagnose classifies a failure of the Bridge at bridgeEndpoint: the forward to the host
// listener is gone (listener_lost), it is there on another port (endpoint_stale), or neither
// (bridge_unreachable). A QEMU whose QMP does not answer is not guessed at.
func (s *qemuSandbox) Diagnose(ctx context.Context, bridgeEndpoint string) FaultClass {
	port, err := s.hostForward(ctx)
	switch {
	case err != nil:
		return FaultBridgeUnreachable
	case port == 0:
		return FaultListenerLost
	case endpointOf(port) != bridgeEndpoint:
		return FaultEndpointStale
	}
	return FaultBridgeUnreachable
}

// Rebind restores the forward to the appliance's host listener on its recorded port, or on a
// free one when another process took that port (the endpoint changes: the Bridge then refreshes).
func (s *qemuSandbox) Rebind(ctx context.Context) error {
	if port, err := s.hostForward(ctx); err != nil || port != 0 {
		return err // there is a forward: nothing to rebind
	}
	ports := []int{s.rec.HostPort}
	if free, err := freePort(); err == nil {
		ports = append(ports, free)
	}
	for _, port := range ports {
		rule := fmt.Sprintf("net0 tcp:127.0.0.1:%d-:%d", port, s.rec.GuestPort)
		if _, err := s.qmp(ctx, "human-monitor-command", map[string]string{"command-line": "hostfwd_add " + rule}); err != nil {
			return err
		}
		if got, err := s.hostForward(ctx); err != nil {
			return err
		} else if got == port {
			return s.setPort(port)
		}
	}
	return fmt.Errorf("hostfwd_add on ports %v: no forward came up", ports)
}

// RefreshEndpoint takes the host listener's endpoint from QEMU's forward as it is now.
func (s *qemuSandbox) RefreshEndpoint(ctx context.Context) error {
	port, err := s.hostForward(ctx)
	if err != nil {
		return err
	}
	if port == 0 {
		return errors.New("no forward to the host listener (a rebind's business)")
	}
	return s.setPort(port)
}

func (s *qemuSandbox) setPort(port int) error {
	s.mu.Lock()
	s.rec.HostPort, s.endpoint = port, endpointOf(port)
	s.mu.Unlock()
	return s.save()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// SnapshotVM saves the whole VM's state (devices and memory, not the disks) to a file next to its
// store disk through QMP: stop, migrate to the file, continue.
func (s *qemuSandbox) SnapshotVM(ctx context.Context, name string) error {
	if _, err := s.qmp(ctx, "stop", nil); err != nil {
		return err
	}
	defer s.qmp(context.Background(), "cont", nil)
	path := filepath.Join(s.dir, name+".vmstate")
	if _, err := s.qmp(ctx, "migrate", map[string]string{"uri": "exec:cat > " + shellQuote(path)}); err != nil {
		return err
	}
	for {
		st, err := s.qmpStatus(ctx, "query-migrate")
		if err != nil {
			return err
		}
		switch st {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("vm snapshot %s: migration %s", name, st)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func shellQuote(s string) string {
	out := "'"
	for _, c := range s {
		if c == '\'' {
			out += `'\''`
		} else {
			out += string(c)
		}
	}
	return out + "'"
}

// vmHost is the vm harness's TB for a daemon: console lines go to logf, cleanups run at stop.
type vmHost struct {
	name     string
	logf     func(format string, args ...any)
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

func (h *vmHost) Helper()          {}
func (h *vmHost) Name() string     { return h.name }
func (h *vmHost) Cleanup(f func()) { h.mu.Lock(); h.cleanups = append(h.cleanups, f); h.mu.Unlock() }
func (h *vmHost) Logf(format string, args ...any) {
	if h.logf != nil {
		h.logf(format, args...)
	}
}
func (h *vmHost) Errorf(format string, args ...any) {
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
	h.Logf(format, args...)
}
func (h *vmHost) Failed() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.failed }

func (h *vmHost) cleanup() {
	h.mu.Lock()
	cs := h.cleanups
	h.cleanups = nil
	h.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}
