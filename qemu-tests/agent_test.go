package qemutests

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allox-os/allox/deploy/kata"
	"github.com/allox-os/allox/internal/appliance"
	"github.com/allox-os/allox/internal/marker"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
	"github.com/allox-os/allox/qemu-tests/internal/standin"
)

// These tests boot out/kata-agent (testdata/kata-agent.hcl), whose /usr/bin/kata-agent is the
// stand-in of internal/standin, NOT the real kata-agent: that one is Rust, its crates cannot be
// fetched here and no release can be downloaded, so it is neither built nor run. The stand-in
// proves the packaging and supervision contract (present and executable, started by init with
// Kata's unit's arguments, environment, cgroup, open-file limit and oom_score_adj, before the
// store; restarted after a crash within the spec's budget while the daemon serves; the VM powered
// off once the budget is spent). It does not prove that a Kata runtime can talk to an agent here:
// there is no vhost-vsock on these machines and the stand-in speaks no ttRPC.

// agentOut is where `make image` builds testdata/kata-agent.hcl.
const agentOut = "kata-agent"

// agentEnv is the environment Kata's unit gets from systemd as init gives it (init/README.md).
var agentEnv = []string{"HOME=/", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// agentBoot is a boot of the agent appliance with the stand-in's port forwarded.
type agentBoot struct {
	*booted
	agent string // host address of the stand-in's port
}

func bootAgent(ctx context.Context, t *testing.T, m mode) *agentBoot {
	t.Helper()
	a := needApplianceIn(t, m, filepath.Join(outDir(), agentOut))
	if a.info.KataAgent == nil || a.info.KataAgent.Version != standin.Version {
		t.Fatalf("%s: kata_agent %+v; want the stand-in (version %q): run `make image`", a.path("boot.json"), a.info.KataAgent, standin.Version)
	}
	token := newToken(t)
	opt := appliance.Options(a.dir, a.info, m, blankDisk(t), token)
	opt.HostFwd[standin.Port] = 0
	v, err := vm.Start(ctx, t, opt)
	if err != nil {
		t.Fatalf("boot %s mode: %v", m, err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(a.info.RPCPort))
	b := &booted{VM: v, app: a, url: url, token: token, rpc: newRPCClient(url, token)}
	return &agentBoot{booted: b, agent: fmt.Sprintf("127.0.0.1:%d", v.HostPort(standin.Port))}
}

// bootAgentAsKata is bootAgent with the machine, devices and kernel command line Kata's Go runtime
// uses (kataBoot), the agent.* parameters of a debug-enabled [agent.kata] among them.
func bootAgentAsKata(ctx context.Context, t *testing.T, k kataBoot) *agentBoot {
	t.Helper()
	a := needApplianceIn(t, k.mode, filepath.Join(outDir(), agentOut))
	token := newToken(t)
	opt := k.options(t, a, blankDisk(t), token)
	opt.HostFwd[standin.Port] = 0
	v, err := vm.Start(ctx, t, opt)
	if err != nil {
		t.Fatalf("boot %s mode as Kata: %v", k.mode, err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(a.info.RPCPort))
	b := &booted{VM: v, app: a, url: url, token: token, rpc: newRPCClient(url, token)}
	return &agentBoot{booted: b, agent: fmt.Sprintf("127.0.0.1:%d", v.HostPort(standin.Port))}
}

// TestKataAgentUnderKataBoot boots the agent appliance as Kata does (NVDIMM image, and initrd) with
// Kata's command line, agent.* included: init starts the agent there too, with Kata's limits.
func TestKataAgentUnderKataBoot(t *testing.T) {
	for _, k := range []kataBoot{
		{mode: imageMode, nvdimm: true, agent: kata.Agent{Debug: true, DebugConsole: true}},
		{mode: initrdMode, agent: kata.Agent{Debug: true}},
	} {
		t.Run(k.mode.String(), func(t *testing.T) {
			ctx := testContext(t, bootBudget)
			b := bootAgentAsKata(ctx, t, k)
			b.waitReady(ctx, t)
			r := b.report(ctx, t)
			if !slices.Equal(r.Argv, []string{"/usr/bin/kata-agent"}) || r.NoFileMax != 1073741824 || r.OOMScoreAdj != "-997" || r.Cgroup != "0::/system/kata-agent" {
				t.Errorf("stand-in under Kata's boot: %+v", r)
			}
			checkInitQuiet(t, b.VM)
			b.powerOff(ctx, t)
		})
	}
}

// report waits for a stand-in whose pid is not in old and returns its report, asked over TCP
// (so that the limits init applies right after exec are in place).
func (b *agentBoot) report(ctx context.Context, t *testing.T, old ...int) standin.Report {
	t.Helper()
	for {
		r, err := standin.Fetch(b.agent)
		if err == nil && !slices.Contains(old, r.PID) {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no new stand-in agent answers on guest port %d (last: %+v, %v)", standin.Port, r, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// consoleIndex is the index of the first console line containing every part, or -1.
func (b *agentBoot) consoleIndex(parts ...string) int {
	return slices.IndexFunc(b.Console(), func(l vm.Line) bool {
		for _, p := range parts {
			if !strings.Contains(l.Text, p) {
				return false
			}
		}
		return true
	})
}

// TestKataAgentStarted checks, in both boot modes, each property of how init starts the agent:
// Kata's kata-agent.service.in (4.1.0) has ExecStart=/usr/bin/kata-agent, LimitNOFILE=1073741824,
// OOMScoreAdjust=-997; systemd gives it PATH; init gives it its own cgroup, is its parent, and
// starts it before it mounts (on a blank disk: formats) the store.
func TestKataAgentStarted(t *testing.T) {
	for _, m := range []mode{imageMode, initrdMode} {
		t.Run(m.String(), func(t *testing.T) {
			ctx := testContext(t, bootBudget)
			b := bootAgent(ctx, t, m)
			b.waitReady(ctx, t)
			r := b.report(ctx, t)
			t.Logf("stand-in report: %+v", r)
			t.Run("argv", func(t *testing.T) {
				if want := []string{"/usr/bin/kata-agent"}; !slices.Equal(r.Argv, want) {
					t.Errorf("argv %q, want %q (ExecStart with no argument)", r.Argv, want)
				}
			})
			t.Run("environment", func(t *testing.T) {
				if !slices.Equal(r.Env, agentEnv) {
					t.Errorf("environment %q, want exactly %q", r.Env, agentEnv)
				}
			})
			t.Run("cgroup", func(t *testing.T) {
				if want := "0::/system/kata-agent"; r.Cgroup != want {
					t.Errorf("/proc/self/cgroup %q, want %q", r.Cgroup, want)
				}
			})
			t.Run("container cgroups", func(t *testing.T) {
				have := strings.Fields(r.ContainerControllers)
				for _, c := range []string{"cpu", "cpuset", "io", "memory", "pids"} {
					if !slices.Contains(have, c) {
						t.Errorf("a cgroup the agent makes at the root has controllers %q, lacking %s: the root's cgroup.subtree_control must enable it for the containers", r.ContainerControllers, c)
					}
				}
			})
			t.Run("open-file limit", func(t *testing.T) {
				if r.NoFileCur != 1073741824 || r.NoFileMax != 1073741824 {
					t.Errorf("RLIMIT_NOFILE %d/%d, want 1073741824/1073741824 (LimitNOFILE)", r.NoFileCur, r.NoFileMax)
				}
			})
			t.Run("oom_score_adj", func(t *testing.T) {
				if r.OOMScoreAdj != "-997" {
					t.Errorf("oom_score_adj %q, want -997 (OOMScoreAdjust)", r.OOMScoreAdj)
				}
			})
			t.Run("limits at start", func(t *testing.T) {
				// The report the stand-in printed as it started: init execs it with the limits
				// already in place (supervise.Trampoline), not set from outside a moment later.
				var first standin.Report
				for _, l := range b.Console() {
					if rep, ok := standin.ParseLine(l.Text); ok && rep.PID == r.PID {
						first = rep
					}
				}
				if first.PID == 0 || first.NoFileCur != 1073741824 || first.NoFileMax != 1073741824 || first.OOMScoreAdj != "-997" {
					t.Errorf("console report at start %+v; want RLIMIT_NOFILE 1073741824 and oom_score_adj -997 from the first instruction", first)
				}
			})
			t.Run("parent", func(t *testing.T) {
				if r.PPID != 1 {
					t.Errorf("ppid %d, want 1: init supervises the agent", r.PPID)
				}
			})
			t.Run("before the store", func(t *testing.T) {
				agent := b.consoleIndex(`msg="service started"`, "service=kata-agent")
				store := b.consoleIndex(`msg="step done"`, `step="store `)
				daemon := b.consoleIndex(`msg="service started"`, "service=workspace-daemon")
				if agent < 0 || store < 0 || daemon < 0 || agent > store || agent > daemon {
					t.Fatalf("console lines: agent started at %d, store mounted at %d, daemon started at %d; want the agent first", agent, store, daemon)
				}
				c := b.Console()
				t.Logf("after QEMU start: agent started %.3fs, store mounted %.3fs, daemon started %.3fs",
					c[agent].At.Seconds(), c[store].At.Seconds(), c[daemon].At.Seconds())
			})
			b.powerOff(ctx, t)
		})
	}
}

// TestKataAgentCrashes kills the stand-in (SIGKILL, on request over its port) in both boot
// modes: each crash within the budget (max_restarts = 2 in the spec) brings a new agent, while the
// workspace daemon keeps answering; the crash after the budget powers the VM off, as Kata's
// FailureAction=poweroff does.
func TestKataAgentCrashes(t *testing.T) {
	for _, m := range []mode{imageMode, initrdMode} {
		t.Run(m.String(), func(t *testing.T) {
			ctx := testContext(t, 2*bootBudget)
			b := bootAgent(ctx, t, m)
			b.waitReady(ctx, t)
			budget := b.app.info.KataAgent.MaxRestarts
			if budget < 1 {
				t.Fatalf("boot.json: kata_agent.max_restarts %d; the test spec must allow a restart", budget)
			}
			serving := b.keepCalling(ctx)
			pids := []int{b.report(ctx, t).PID}
			for i := 1; i <= budget; i++ {
				b.crash(t)
				var info rpc.SystemInfo // at once, while init restarts the agent
				if err := b.rpc.Call(ctx, rpc.ActionSystemInfo, nil, &info); err != nil {
					t.Errorf("system.info right after crash %d: %v", i, err)
				}
				r := b.report(ctx, t, pids...)
				t.Logf("crash %d: pid %d → %d", i, pids[len(pids)-1], r.PID)
				if r.PPID != 1 || r.OOMScoreAdj != "-997" || r.Cgroup != "0::/system/kata-agent" {
					t.Errorf("restarted agent %+v: not started as the first one", r)
				}
				pids = append(pids, r.PID)
			}
			t.Run("restarted", func(t *testing.T) {
				if got := strings.Count(consoleText(b.VM), marker.Exited("kata-agent", 137)); got != budget {
					t.Errorf("%d× %q on the console, want %d", got, marker.Exited("kata-agent", 137), budget)
				}
			})
			t.Run("daemon serves meanwhile", func(t *testing.T) {
				calls, failures := serving()
				t.Logf("%d system.info calls while the agent crashed %d times", calls, budget)
				if calls < budget || len(failures) > 0 {
					t.Errorf("system.info while the agent crashed: %d calls, failures %q", calls, failures)
				}
			})
			t.Run("budget spent powers off", func(t *testing.T) {
				b.crash(t)
				exited := make(chan error, 1)
				go func() { exited <- b.Wait() }()
				select {
				case err := <-exited:
					if err != nil {
						t.Fatalf("QEMU after the agent's last crash: %v", err)
					}
				case <-ctx.Done():
					b.Kill()
					t.Fatalf("the VM still runs after the agent crashed %d times with max_restarts %d", budget+1, budget)
				}
				if b.consoleIndex("restart budget spent") < 0 || b.consoleIndex(`msg="going down"`, "a critical service ended: kata-agent") < 0 {
					t.Error("console lacks the spent budget and the critical service that took the VM down")
				}
				if !b.consoleHas(marker.PowerOff) {
					t.Errorf("console lacks %s: init did not power off through its shutdown path", marker.PowerOff)
				}
				checkNoKernelTrouble(t, b.VM)
			})
		})
	}
}

// crash asks the stand-in to SIGKILL itself.
func (b *agentBoot) crash(t *testing.T) {
	t.Helper()
	if got, err := standin.Ask(b.agent, "crash"); err != nil || got != "crashing" {
		t.Fatalf("crash the stand-in: %q, %v", got, err)
	}
}

// keepCalling calls system.info every 200 ms until the returned function is called, which
// reports the number of calls and the failures.
func (b *agentBoot) keepCalling(ctx context.Context) func() (int, []string) {
	stop := make(chan struct{})
	var (
		mu       sync.Mutex
		calls    int
		failures []string
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			var info rpc.SystemInfo
			err := b.rpc.Call(ctx, rpc.ActionSystemInfo, nil, &info)
			mu.Lock()
			calls++
			if err != nil {
				failures = append(failures, err.Error())
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() (int, []string) {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return calls, failures
	}
}

func consoleText(v *vm.VM) string {
	var b strings.Builder
	for _, l := range v.Console() {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}
