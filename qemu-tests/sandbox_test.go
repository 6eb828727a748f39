package qemutests

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/allox-os/allox/internal/rpc"
)

// attacker drives runs of one session of the booted default appliance, as an agent would: every
// subtest of TestSandboxAttacksInGuest is one attack, and fails if the attack works.
type attacker struct {
	t       *testing.T
	ctx     context.Context
	b       *booted
	agent   string
	session string
}

func (g *attacker) must(t *testing.T, action string, params map[string]any, res any) {
	t.Helper()
	if err := g.b.rpc.Call(g.ctx, action, params, res); err != nil {
		t.Fatalf("%s %v: %v", action, params, err)
	}
}

// sh runs script with /bin/sh in the attacker's session and returns its stdout (stderr appended
// after a line "--stderr--") and the finished run.
func (g *attacker) sh(t *testing.T, script string, extra map[string]any) (string, rpc.Run) {
	t.Helper()
	p := map[string]any{"agent_id": g.agent, "session_id": g.session, "argv": []string{"/bin/sh", "-c", script}}
	for k, v := range extra {
		p[k] = v
	}
	var r rpc.Run
	g.must(t, rpc.ActionProcessStart, p, &r)
	g.must(t, rpc.ActionProcessWait, map[string]any{"run_id": r.RunID}, &r)
	var out, errOut rpc.Output
	g.must(t, rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "limit": 1 << 20}, &out)
	g.must(t, rpc.ActionProcessOutput, map[string]any{"run_id": r.RunID, "stream": "stderr", "limit": 1 << 20}, &errOut)
	return out.Data + "--stderr--\n" + errOut.Data, r
}

// probeOnce builds the probe (a static binary of raw syscalls) once per test binary.
var probeOnce = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "allox-probe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./internal/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build probe: %v\n%s", err, out)
	}
	return os.ReadFile(bin)
})

// uploadProbe puts the probe into current/ of the attacker's session as ./probe: gzip, base64 and
// chunks that fit the RPC request limit, through process.start's stdin.
func (g *attacker) uploadProbe(t *testing.T) {
	t.Helper()
	bin, err := probeOnce()
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(bin)
	zw.Close()
	text := base64.StdEncoding.EncodeToString(z.Bytes())
	const chunk = 512 << 10
	for off := 0; off < len(text); off += chunk {
		part := text[off:min(off+chunk, len(text))]
		if out, r := g.sh(t, "cat >> probe.b64", map[string]any{"stdin": part}); r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("uploading the probe: %+v\n%s", r, out)
		}
	}
	if out, r := g.sh(t, "base64 -d probe.b64 | gunzip > probe && chmod 755 probe && rm probe.b64 && ./probe raw 39", nil); r.ExitCode == nil || *r.ExitCode != 0 || !strings.HasPrefix(out, "ok ") {
		t.Fatalf("the probe does not run in the guest: %+v\n%s", r, out)
	}
}

// probe runs ./probe with args and returns its one-line answer ("ok ..." or "errno=NAME").
func (g *attacker) probe(t *testing.T, args ...string) string {
	t.Helper()
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	out, r := g.sh(t, "./probe "+strings.Join(q, " "), nil)
	line, _, _ := strings.Cut(out, "\n")
	if r.ExitCode == nil || *r.ExitCode != 0 || line == "" {
		t.Fatalf("probe %q: %+v\n%s", args, r, out)
	}
	return line
}

// TestSandboxAttacksInGuest boots the default appliance and attacks its sandbox from inside runs,
// on the appliance's own kernel, bubblewrap and network guard: every subtest is one attack of
// issue 11 and fails if the attack works.
func TestSandboxAttacksInGuest(t *testing.T) {
	a := needAppliance(t, imageMode)
	ctx := testContext(t, 3*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)
	g := &attacker{t: t, ctx: ctx, b: b, agent: "agent-a", session: "session-1"}
	for _, p := range []map[string]any{
		{"agent_id": "agent-a"}, {"agent_id": "agent-b"},
		{"agent_id": "agent-a", "session_id": "session-1"}, {"agent_id": "agent-b", "session_id": "session-1"},
	} {
		action := rpc.ActionAgentCreate
		if _, ok := p["session_id"]; ok {
			action = rpc.ActionSessionCreate
		}
		g.must(t, action, p, nil)
	}
	var info rpc.SystemInfo
	g.must(t, rpc.ActionSystemInfo, nil, &info)
	t.Logf("sandbox: %+v", info.Sandbox)
	g.uploadProbe(t)

	t.Run("system.info reports the boundary", func(t *testing.T) {
		sb := info.Sandbox
		if sb.RunUID == 0 || sb.RunGID == 0 || sb.ManagedExecution || len(sb.Seccomp) == 0 {
			t.Errorf("system.info sandbox = %+v: want an unprivileged identity, the seccomp rules and no managed execution", sb)
		}
		for _, p := range []uint16{8092, 8093} {
			if !slices.Contains(sb.GuardedPorts, p) {
				t.Errorf("guarded ports %v lack the daemon's port %d", sb.GuardedPorts, p)
			}
		}
	})
	t.Run("run is root", func(t *testing.T) {
		out, _ := g.sh(t, `id -u; id -g; grep -E '^(Cap(Eff|Prm|Inh|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status; cat /proc/self/uid_map`, nil)
		if !strings.HasPrefix(out, fmt.Sprintf("%d\n%d\n", info.Sandbox.RunUID, info.Sandbox.RunGID)) {
			t.Errorf("run's identity is not the unprivileged one:\n%s", out)
		}
		for _, l := range strings.Split(out, "\n") {
			k, v, _ := strings.Cut(l, ":")
			v = strings.TrimSpace(v)
			if strings.HasPrefix(k, "Cap") && v != "0000000000000000" || k == "NoNewPrivs" && v != "1" || k == "Seccomp" && v != "2" {
				t.Errorf("%s = %s in a run", k, v)
			}
		}
	})
	t.Run("core_pattern", func(t *testing.T) {
		out, _ := g.sh(t, `cat /proc/sys/kernel/core_pattern; echo "|$PWD/h.sh" > /proc/sys/kernel/core_pattern && echo WROTE; cat /proc/sys/kernel/core_pattern`, nil)
		lines := strings.Split(out, "\n")
		if strings.Contains(out, "WROTE") || strings.Contains(out, "h.sh") || len(lines) < 2 || lines[0] != lines[1] {
			t.Errorf("core_pattern written from a run:\n%s", out)
		}
	})
	t.Run("nested user namespace", func(t *testing.T) {
		if out, _ := g.sh(t, `unshare -Ur id -u && echo NESTED`, nil); strings.Contains(out, "NESTED") {
			t.Errorf("a run made a user namespace of its own:\n%s", out)
		}
	})
	t.Run("root-only files", func(t *testing.T) {
		if out, _ := g.sh(t, `for f in /etc/shadow /etc/gshadow; do test -e $f || echo "MISSING $f"; head -c1 $f >/dev/null 2>&1 && echo "READ $f"; done`, nil); strings.Contains(out, "READ") || strings.Contains(out, "MISSING") {
			t.Errorf("root-only files from a run:\n%s", out)
		}
	})
	// runc's masked paths (those this kernel has): empty to a run, and no write sticks.
	for _, f := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats", "/proc/interrupts", "/proc/timer_stats"} {
		t.Run("masked "+f, func(t *testing.T) {
			// procfs files report size 0: look at what a read returns and at the mount over it.
			out, _ := g.sh(t, `test -e `+f+` || { echo ABSENT; exit 0; }; n=$(head -c 64 `+f+` 2>/dev/null | wc -c); echo "bytes=$n"; grep -q " `+f+` " /proc/self/mountinfo || echo UNMASKED`, nil)
			if strings.Contains(out, "UNMASKED") || strings.Contains(out, "bytes=") && !strings.Contains(out, "bytes=0") {
				t.Errorf("%s is not masked in a run:\n%s", f, out)
			}
		})
	}
	for _, d := range []string{"/proc/acpi", "/proc/scsi", "/proc/asound"} {
		t.Run("masked "+d, func(t *testing.T) {
			if out, _ := g.sh(t, `test -d `+d+` || exit 0; ls -A `+d+` | grep -q . && echo CONTENT; grep -q " `+d+` " /proc/self/mountinfo || echo UNMASKED; touch `+d+`/x 2>/dev/null && echo WROTE; true`, nil); strings.Contains(out, "CONTENT") || strings.Contains(out, "WROTE") || strings.Contains(out, "UNMASKED") {
				t.Errorf("%s is not masked:\n%s", d, out)
			}
		})
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq"} {
		t.Run("read-only "+p, func(t *testing.T) {
			if out, _ := g.sh(t, `test -e `+p+` || exit 0; grep " `+p+` " /proc/self/mounts | grep -q " ro[ ,]" || echo "RW"`, nil); strings.Contains(out, "RW") {
				t.Errorf("%s is not a read-only mount in a run:\n%s", p, out)
			}
		})
	}
	t.Run("sysrq-trigger", func(t *testing.T) {
		if out, _ := g.sh(t, `echo h > /proc/sysrq-trigger && echo WROTE; true`, nil); strings.Contains(out, "WROTE") {
			t.Errorf("a run wrote /proc/sysrq-trigger:\n%s", out)
		}
	})
	for _, p := range []string{"/sys", "/sys/fs/cgroup", "/sys/fs/bpf", "/sys/kernel/tracing", "/sys/kernel/debug", "/sys/firmware"} {
		t.Run("absent "+p, func(t *testing.T) {
			if out, _ := g.sh(t, `test -e `+p+` && echo VISIBLE; true`, nil); strings.Contains(out, "VISIBLE") {
				t.Errorf("%s is visible in a run", p)
			}
		})
	}
	t.Run("cross-agent process.start through the loopback listener", func(t *testing.T) {
		body := `{"action":"process.start","params":{"agent_id":"agent-b","session_id":"session-1","argv":["/bin/true"]}}`
		out, _ := g.sh(t, `wget -q -T 5 -O- --header 'Content-Type: application/json' --post-data '`+body+`' http://127.0.0.1:8092/v1/rpc && echo REACHED; true`, nil)
		var list struct{ Runs []rpc.Run }
		g.must(t, rpc.ActionProcessList, map[string]any{"agent_id": "agent-b", "session_id": "session-1"}, &list)
		if strings.Contains(out, "REACHED") || len(list.Runs) != 0 {
			t.Errorf("a run of agent-a drove agent-b's session (runs there: %d):\n%s", len(list.Runs), out)
		}
	})
	t.Run("btrfs subvolumes", func(t *testing.T) {
		out, _ := g.sh(t, `btrfs subvolume create nested && echo CREATED; btrfs subvolume snapshot . snap && echo SNAPSHOT; test -e nested && echo EXISTS; true`, nil)
		if strings.Contains(out, "CREATED") || strings.Contains(out, "SNAPSHOT") || strings.Contains(out, "EXISTS") {
			t.Errorf("a run made a Btrfs subvolume or snapshot:\n%s", out)
		}
		if !strings.Contains(out, "Operation not permitted") {
			t.Errorf("want the seccomp filter's EPERM:\n%s", out)
		}
	})
	t.Run("launcher command line", func(t *testing.T) {
		out, _ := g.sh(t, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`, nil)
		for _, leak := range []string{"/var/lib/allox", "--bind", "--setenv", ".allox-state"} {
			if strings.Contains(out, leak) {
				t.Errorf("a run reads the launcher's command line (%q):\n%s", leak, out)
			}
		}
	})
	t.Run("cwd probes host paths", func(t *testing.T) {
		g.sh(t, `ln -s /etc to-etc; ln -s /nonexistent-allox to-nothing`, nil)
		var answers []string
		for _, cwd := range []string{"to-etc", "to-nothing"} {
			err := g.b.rpc.Call(ctx, rpc.ActionProcessStart, map[string]any{"agent_id": g.agent, "session_id": g.session,
				"argv": []string{"/bin/true"}, "cwd": cwd}, nil)
			if err == nil {
				t.Fatalf("cwd %q outside current/ accepted", cwd)
			}
			answers = append(answers, strings.ReplaceAll(err.Error(), cwd, "CWD"))
		}
		if answers[0] != answers[1] {
			t.Errorf("cwd answers tell an existing host path from a missing one:\n%s\n%s", answers[0], answers[1])
		}
	})
	t.Run("vsock", func(t *testing.T) {
		if got := g.probe(t, "raw", "41", "40", "1", "0"); got != "errno=EPERM" { // socket(AF_VSOCK, SOCK_STREAM, 0)
			t.Errorf("socket(AF_VSOCK) from a run: %s, want errno=EPERM", got)
		}
	})
	t.Run("seccomp", func(t *testing.T) { g.seccomp(t, info.Sandbox.Seccomp) })
	g.controlPlane(t, info)
	b.powerOff(ctx, t)
}

// seccomp makes every call that system.info says the filter refuses, with arguments that meet the
// rule's conditions (and are otherwise zero: harmless had the call gone through), all in one run,
// and checks each answer in a subtest of its own.
func (g *attacker) seccomp(t *testing.T, rules []rpc.SeccompRule) {
	var script strings.Builder
	for i, r := range rules {
		fmt.Fprintf(&script, "echo \"%d $(./probe raw %s)\"\n", i, strings.Join(seccompArgs(r), " "))
	}
	out, _ := g.sh(t, script.String(), nil)
	answers := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if i, a, ok := strings.Cut(l, " "); ok {
			answers[i] = a
		}
	}
	for i, r := range rules {
		t.Run(fmt.Sprintf("%s %s", r.Syscall, r.When), func(t *testing.T) {
			if got, want := answers[fmt.Sprint(i)], "errno="+r.Errno; got != want {
				t.Errorf("%s(%s) from a run: %q, want %s", r.Syscall, strings.Join(seccompArgs(r)[1:], ", "), got, want)
			}
		})
	}
}

// seccompArgs is the probe's raw call for a rule: its number and six arguments meeting its
// conditions.
func seccompArgs(r rpc.SeccompRule) []string {
	var args [6]uint64
	var ne []uint64
	for _, a := range r.Args {
		switch a.Op {
		case "eq32", "any_bit":
			args[a.Index] = a.Value
		case "ne":
			ne = append(ne, a.Value)
			for slices.Contains(ne, args[a.Index]) {
				args[a.Index]++
			}
		}
	}
	out := []string{fmt.Sprint(r.Number)}
	for _, a := range args {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

// controlPlane is the subtests that try to reach, or take, the daemon's listeners from a run.
func (g *attacker) controlPlane(t *testing.T, info rpc.SystemInfo) {
	hostAddr := g.nicAddress(t)
	targets := []struct{ net, ip string }{
		{"tcp4", "127.0.0.1"}, {"tcp4", "127.0.0.2"}, {"tcp4", "0.0.0.0"}, {"tcp4", hostAddr},
		{"tcp6", "::1"}, {"tcp6", "::ffff:127.0.0.1"}, {"tcp6", "::"}, {"tcp6", "::ffff:" + hostAddr},
	}
	for _, port := range info.Sandbox.GuardedPorts {
		for _, tg := range targets {
			t.Run(fmt.Sprintf("connect %s %s port %d", tg.net, tg.ip, port), func(t *testing.T) {
				if got := g.probe(t, "connect", tg.net, tg.ip, fmt.Sprint(port)); got != "errno=EPERM" {
					t.Errorf("a run connected to the daemon's port: %s", got)
				}
			})
		}
		t.Run(fmt.Sprintf("connect localhost by name port %d", port), func(t *testing.T) {
			// The guest resolves names from /etc/hosts only (it has no DNS of its own).
			out, _ := g.sh(t, fmt.Sprintf(`for ip in $(awk '!/^#/ { for (i = 2; i <= NF; i++) if ($i == "localhost") print $1 }' /etc/hosts); do
case $ip in *:*) n=tcp6;; *) n=tcp4;; esac; echo "$ip $(./probe connect $n $ip %d)"; done`, port), nil)
			lines := strings.Split(strings.TrimSpace(strings.Split(out, "--stderr--")[0]), "\n")
			if len(lines) == 0 || lines[0] == "" {
				t.Fatalf("localhost resolves to nothing in a run:\n%s", out)
			}
			for _, l := range lines {
				if !strings.HasSuffix(l, "errno=EPERM") {
					t.Errorf("a run reached the daemon by name: %s", l)
				}
			}
		})
		for _, n := range []string{"udp4", "udp6"} {
			ip := map[string]string{"udp4": "127.0.0.1", "udp6": "::1"}[n]
			t.Run(fmt.Sprintf("sendto %s port %d", n, port), func(t *testing.T) {
				if got := g.probe(t, "sendto", n, ip, fmt.Sprint(port)); got != "errno=EPERM" {
					t.Errorf("a run sent to the daemon's port: %s", got)
				}
			})
		}
		for _, tg := range []struct{ net, ip string }{{"tcp4", "0.0.0.0"}, {"tcp4", "127.0.0.1"}, {"tcp4", hostAddr}, {"tcp6", "::"}, {"tcp6", "::1"}, {"udp4", "0.0.0.0"}, {"udp6", "::"}} {
			t.Run(fmt.Sprintf("bind %s %s port %d", tg.net, tg.ip, port), func(t *testing.T) {
				if got := g.probe(t, "bind", tg.net, tg.ip, fmt.Sprint(port)); got != "errno=EPERM" {
					t.Errorf("a run could bind (squat) the daemon's port: %s", got)
				}
			})
		}
	}
	// The guard sees only the ports a process asks for: one the kernel picks itself (bind to 0, an
	// unbound listen or connect) must never be a guarded one.
	t.Run("squat through an ephemeral port", func(t *testing.T) {
		out, _ := g.sh(t, `cat /proc/sys/net/ipv4/ip_local_port_range /proc/sys/net/ipv4/ip_local_reserved_ports`, nil)
		var lo, hi int
		if _, err := fmt.Sscan(out, &lo, &hi); err != nil {
			t.Fatalf("ip_local_port_range: %v\n%s", err, out)
		}
		reserved := strings.Fields(strings.Split(out, "\n")[1])
		for _, p := range info.Sandbox.GuardedPorts {
			if int(p) >= lo && int(p) <= hi && !slices.Contains(reserved, fmt.Sprint(p)) {
				t.Errorf("guarded port %d lies in the ephemeral range %d-%d and is not reserved: a run could be handed it", p, lo, hi)
			}
		}
	})
	t.Run("control: other ports stay reachable", func(t *testing.T) {
		if got := g.probe(t, "connect", "tcp4", "127.0.0.1", "9"); got != "errno=ECONNREFUSED" {
			t.Errorf("connect to an unguarded closed port = %s, want errno=ECONNREFUSED: the guard refuses more than the daemon's ports", got)
		}
		if got := g.probe(t, "bind", "tcp4", "127.0.0.1", "18092"); got != "ok " {
			t.Errorf("bind an unguarded port = %s, want ok", got)
		}
	})
}

// nicAddress is the guest's own IPv4 address on its NIC, as a run sees it.
func (g *attacker) nicAddress(t *testing.T) string {
	t.Helper()
	out, _ := g.sh(t, `ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1`, nil)
	addr := strings.TrimSpace(strings.Split(out, "--stderr--")[0])
	if addr == "" {
		out, _ = g.sh(t, `hostname -I 2>/dev/null | cut -d' ' -f1`, nil)
		addr = strings.TrimSpace(strings.Split(out, "--stderr--")[0])
	}
	if addr == "" {
		t.Fatalf("no NIC address visible in a run:\n%s", out)
	}
	return addr
}
