package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
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
// a QMP socket for VM-level snapshots.
type QEMURuntime struct {
	Out     string // the mkimage output directory
	State   string // store disks
	Sockets string // QMP sockets (short: AF_UNIX paths are bounded); default State
	Logf    func(format string, args ...any)
	// GuestFwd forwards guest connections to vm.GuestFwdAddr:port to the host's 127.0.0.1:port2
	// (the agents' model endpoint, for one); restricted user networking reaches nothing else.
	GuestFwd map[int]int
	// TCGCPU is the -cpu model when QEMU emulates (no KVM), e.g. "max" as Kata's own machine
	// takes: the Bun-built agent CLIs (claude, opencode) need AVX2, which QEMU's default model
	// lacks (they die of SIGILL). Under KVM the guest has the host's CPU. "" keeps QEMU's default.
	TCGCPU string
}

// Boot starts the appliance and waits until its services are ready.
func (r *QEMURuntime) Boot(ctx context.Context, d spec.DevBox) (Sandbox, error) {
	info, err := artifact.ReadBootInfo(r.Out)
	if err != nil {
		return nil, err
	}
	disk := filepath.Join(r.State, "workspace-"+d.Name+".img")
	if err := appliance.EnsureDisk(disk, 4<<30); err != nil {
		return nil, err
	}
	token := randomToken()
	opt := appliance.Options(r.Out, info, appliance.Image, disk, token)
	if d.MemoryMiB > opt.MemoryMiB {
		opt.MemoryMiB = d.MemoryMiB
	}
	sockets := r.Sockets
	if sockets == "" {
		sockets = r.State
	}
	opt.QMP = filepath.Join(sockets, "qmp-"+d.Name+".sock")
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
	s := &qemuSandbox{v: v, host: host, cancel: cancel, token: token, done: make(chan struct{}), dir: r.State,
		endpoint: fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(info.RPCPort))}
	go func() { v.Wait(); close(s.done) }()
	rctx, rcancel := context.WithTimeout(ctx, vm.Scaled(120*time.Second))
	defer rcancel()
	if _, err := appliance.WaitReady(rctx, v, info); err != nil {
		s.kill()
		return nil, fmt.Errorf("appliance not ready (accel %s): %w", vm.Accel(), err)
	}
	return s, nil
}

type qemuSandbox struct {
	v        *vm.VM
	host     *vmHost
	cancel   context.CancelFunc
	endpoint string
	token    string
	dir      string // where VM snapshots go
	done     chan struct{}
	stopOnce sync.Once
}

func (s *qemuSandbox) Endpoint() string      { return s.endpoint }
func (s *qemuSandbox) Token() string         { return s.token }
func (s *qemuSandbox) Done() <-chan struct{} { return s.done }

// Stop powers the guest off through its daemon (init's clean shutdown) and kills QEMU if it has
// not exited within a minute.
func (s *qemuSandbox) Stop(ctx context.Context) error {
	c := rpc.NewClient(s.endpoint, s.token, &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second})
	c.Call(ctx, rpc.ActionSystemPowerOff, nil, nil) // the guest may go down before it answers
	select {
	case <-s.done:
	case <-ctx.Done():
	case <-time.After(vm.Scaled(60 * time.Second)):
	}
	s.kill()
	return nil
}

func (s *qemuSandbox) kill() {
	s.stopOnce.Do(func() {
		s.v.Kill()
		s.cancel()
		<-s.done
		s.host.cleanup()
	})
}

// SnapshotVM saves the whole VM's state (devices and memory, not the disks) to a file next to its
// store disk through QMP: stop, migrate to the file, continue.
func (s *qemuSandbox) SnapshotVM(ctx context.Context, name string) error {
	if _, err := s.v.QMP(ctx, "stop", nil); err != nil {
		return err
	}
	defer s.v.QMP(context.Background(), "cont", nil)
	path := filepath.Join(s.dir, name+".vmstate")
	if _, err := s.v.QMP(ctx, "migrate", map[string]string{"uri": "exec:cat > " + shellQuote(path)}); err != nil {
		return err
	}
	for {
		raw, err := s.v.QMP(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
		}
		json.Unmarshal(raw, &st)
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("vm snapshot %s: migration %s", name, st.Status)
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
