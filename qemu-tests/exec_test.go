package qemutests

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
)

// TestExecInGuest drives process.exec on the booted appliance over its host listener, as the
// Probe's SSH endpoint does: an interactive shell on the run's own terminal in the guest (its
// size, a resize, its exit status), a piped run, and a caller that goes away taking its run along.
func TestExecInGuest(t *testing.T) {
	a := needAppliance(t, imageMode)
	ctx := testContext(t, 2*bootBudget)
	b := a.boot(ctx, t, imageMode, blankDisk(t))
	b.waitReady(ctx, t)
	g := &attacker{t: t, ctx: ctx, b: b, agent: "agent-a", session: "session-1"}
	g.must(t, rpc.ActionAgentCreate, map[string]any{"agent_id": "agent-a"}, nil)
	g.must(t, rpc.ActionSessionCreate, map[string]any{"agent_id": "agent-a", "session_id": "session-1"}, nil)
	params := func(argv []string, term *rpc.ExecTerminal) map[string]any {
		p := map[string]any{"agent_id": "agent-a", "session_id": "session-1", "argv": argv}
		if term != nil {
			p["terminal"] = term
		}
		return p
	}

	t.Run("the network is settled at ready", func(t *testing.T) {
		// no IPv6 address still in duplicate address detection (IFA_F_TENTATIVE, 0x40, in
		// /proc/net/if_inet6's flags): its local route would appear under the first runs
		out, r := g.sh(t, `cat /proc/sys/net/ipv6/conf/eth0/accept_dad; cat /proc/net/if_inet6`, nil)
		if r.ExitCode == nil || *r.ExitCode != 0 {
			t.Fatalf("read the guest's IPv6 state: %q", out)
		}
		lines := strings.Split(strings.TrimSpace(strings.Split(out, "--stderr--")[0]), "\n")
		if lines[0] != "0" {
			t.Errorf("eth0's accept_dad is %q, want 0", lines[0])
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) < 6 {
				continue
			}
			flags, err := strconv.ParseUint(f[4], 16, 32)
			if err != nil || flags&0x40 != 0 {
				t.Errorf("an address still tentative at ready: %q", l)
			}
		}
	})

	t.Run("a shell on its own terminal", func(t *testing.T) {
		x, err := b.rpc.Exec(ctx, params([]string{"/bin/sh", "-i"}, &rpc.ExecTerminal{Rows: 24, Cols: 80, Term: "xterm"}))
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		go io.Copy(io.Discard, x.Stderr)
		io.WriteString(x, ": </dev/tty && echo ctty=yes; echo uid=$(id -u); stty size\n")
		out := testenv.ReadUntil(t, x.Stdout, "24 80")
		if !strings.Contains(out, "ctty=yes") || !strings.Contains(out, "uid=2000") {
			t.Errorf("the shell's terminal output %q: want its own controlling terminal, as the run user", out)
		}
		if err := x.Resize(50, 160); err != nil {
			t.Fatal(err)
		}
		io.WriteString(x, "stty size; exit 3\n")
		testenv.ReadUntil(t, x.Stdout, "50 160")
		io.Copy(io.Discard, x.Stdout)
		end, err := x.Wait(ctx)
		if err != nil || end.State != "exited" || end.ExitCode == nil || *end.ExitCode != 3 {
			t.Fatalf("final record %+v, %v; want exited with 3", end, err)
		}
	})

	t.Run("pipes", func(t *testing.T) {
		x, err := b.rpc.Exec(ctx, params([]string{"/bin/sh", "-c", "tr a-z A-Z; echo done >&2"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		errs := make(chan string, 1)
		go func() { e, _ := io.ReadAll(x.Stderr); errs <- string(e) }()
		io.WriteString(x, "through the guest\n")
		x.CloseStdin()
		out, _ := io.ReadAll(x.Stdout)
		if string(out) != "THROUGH THE GUEST\n" || <-errs != "done\n" {
			t.Fatalf("stdout %q", out)
		}
		if end, err := x.Wait(ctx); err != nil || end.ExitCode == nil || *end.ExitCode != 0 {
			t.Fatalf("final record %+v, %v", end, err)
		}
	})

	t.Run("the caller goes away", func(t *testing.T) {
		x, err := b.rpc.Exec(ctx, params([]string{"/bin/sh", "-c", "echo up; sleep 600"}, nil))
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, x.Stderr)
		testenv.ReadUntil(t, x.Stdout, "up")
		x.Close()
		var r rpc.Run
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			g.must(t, rpc.ActionProcessGet, map[string]any{"run_id": x.Run.RunID}, &r)
			if r.State != "running" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if r.State != "killed" {
			t.Fatalf("the run of a caller that went away: %+v, want killed", r)
		}
	})
	b.powerOff(context.WithoutCancel(ctx), t)
}
