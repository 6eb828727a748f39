package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/agent"
	"github.com/allox-os/allox/deploy/probe/internal/dialogfwd"
	"github.com/allox-os/allox/deploy/probe/internal/pki"
	"github.com/allox-os/allox/deploy/probe/internal/probe"
	"github.com/allox-os/allox/deploy/probe/internal/spec"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

func serve(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("probe serve", flag.ContinueOnError)
	gw := fs.String("gateway", "", "comma-separated Gateway replica URLs (https://...)")
	host := fs.String("host", "", "this host's name: the CN of its certificate")
	pkiDir := fs.String("pki", "", "directory with ca.pem and <host>.pem, <host>-key.pem (gateway ca issue --role probe)")
	state := fs.String("state", "", "state directory (status, sandboxes' tokens and logs)")
	slots := fs.Int("slots", 4, "Worker Sandboxes this host takes")
	daemon := fs.String("workspace-daemon", "", "process runtime: the allox-workspace-daemon binary (enables runtime \"process\")")
	store := fs.String("store", "", "process runtime: a directory on Btrfs for the DevBoxes' stores")
	daemonClient := fs.String("client", "", "process runtime: the in-sandbox client (services/allox) bound into runs; empty binds none")
	sockets := fs.String("sockets", "", "process runtime: parent of the session-socket directories (default --state; at most ~60 bytes)")
	cgroupParent := fs.String("cgroup-parent", "allox-probe", "process runtime: cgroup parent prefix of the daemons")
	applianceOut := fs.String("appliance", "", "qemu runtime: the mkimage output directory of the appliance (enables runtime \"qemu\")")
	supervise := fs.Duration("supervise-every", time.Second, "session supervision cadence")
	healAttempts := fs.Int("heal-attempts", 5, "self-heal: failed attempts of one fault before it is escalated to the Gateway")
	healBackoff := fs.Duration("heal-backoff", time.Second, "self-heal: the wait after a failed attempt, doubled after each")
	healMaxBackoff := fs.Duration("heal-max-backoff", 30*time.Second, "self-heal: the longest wait between attempts")
	sshListen := fs.String("ssh-listen", "", "ssh_remote: the SSH endpoint's address, e.g. 0.0.0.0:2222 (empty: no ssh_remote channel)")
	sshCA := fs.String("ssh-user-ca", "", "ssh_remote: the Gateway's SSH certificate authority, its public key in authorized_keys form (gateway ssh-ca init writes ssh-ca.pub)")
	sshHostKey := fs.String("ssh-host-key", "", "ssh_remote: the endpoint's host key, an OpenSSH private key file, made if missing (default STATE/ssh-host-key)")
	dialogOn := fs.Bool("dialog", false, "dialog: forward the sandboxes' dialog questions to every Gateway replica and deliver the answers (the appliance needs the dialog plugin)")
	agentKeys := fs.String("agent-keys", "", "agent tasks: a directory of API keys, a file per key (mode 0600) named as tasks reference it (gateway task --api-key-ref NAME)")
	qemuCPU := fs.String("qemu-cpu", "", "qemu runtime: the -cpu model under TCG, e.g. max (the Bun-built claude and opencode need AVX2)")
	var guestFwd multiFlag
	fs.Var(&guestFwd, "guest-fwd", "qemu runtime: GUESTPORT=HOSTPORT forwards the guest's 10.0.2.100:GUESTPORT to the host's 127.0.0.1:HOSTPORT (a model endpoint; repeat)")
	var daemonFlags multiFlag
	fs.Var(&daemonFlags, "daemon-flag", "process runtime: one more flag of the workspace daemons (repeat), e.g. --daemon-flag=--dialog")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *gw == "":
		return errors.New("serve: --gateway is required, e.g. https://127.0.0.1:7443")
	case *host == "":
		return errors.New("serve: --host is required (the name in this host's probe certificate)")
	case *pkiDir == "":
		return errors.New("serve: --pki is required")
	case *state == "":
		return errors.New("serve: --state is required")
	case *daemon != "" && *store == "":
		return errors.New("serve: --workspace-daemon needs --store (a directory on Btrfs)")
	case *healAttempts < 1:
		return fmt.Errorf("serve: --heal-attempts %d: must be at least 1", *healAttempts)
	case *healBackoff <= 0 || *healMaxBackoff < *healBackoff:
		return fmt.Errorf("serve: --heal-backoff %v, --heal-max-backoff %v: both must be positive, the maximum at least the backoff", *healBackoff, *healMaxBackoff)
	}
	fwd, err := parseGuestFwd(guestFwd)
	if err != nil {
		return err
	}
	for _, p := range []*string{state, store, applianceOut, agentKeys} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	// Traversable (not listable): sandboxed runs, as the run uid, reach their session sockets below it.
	if err := os.MkdirAll(*state, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(*state, 0o711); err != nil {
		return err
	}
	tc, err := pki.ClientConfig(filepath.Join(*pkiDir, pki.CAFile), filepath.Join(*pkiDir, *host+".pem"), filepath.Join(*pkiDir, *host+"-key.pem"))
	if err != nil {
		return err
	}
	client, err := wire.NewProbeClient(*host, strings.Split(*gw, ","), tc)
	if err != nil {
		return err
	}
	runtimes := map[string]probe.Runtime{}
	if *daemon != "" {
		runtimes[spec.RuntimeProcess] = &probe.ProcessRuntime{Daemon: *daemon, Store: *store, State: *state, CgroupParent: *cgroupParent, Client: *daemonClient, Sockets: *sockets, Extra: daemonFlags}
	}
	if *applianceOut != "" {
		q := &probe.QEMURuntime{Out: *applianceOut, State: *state, Sockets: *sockets, GuestFwd: fwd, TCGCPU: *qemuCPU,
			Logf:  func(format string, args ...any) { log.Debug("console", "line", fmt.Sprintf(format, args...)) },
			Notef: func(format string, args ...any) { log.Info("qemu runtime: " + fmt.Sprintf(format, args...)) }}
		for _, f := range q.CleanStale() {
			log.Info("removed a stale sandbox record", "record", f)
		}
		runtimes[spec.RuntimeQEMU] = q
	}
	var p *probe.Probe
	var channels []probe.ChannelSupervisor
	var serveSSH func()
	startDialog := func() {}
	prompts, err := wire.NewTaskClient(*host, strings.Split(*gw, ","), tc)
	if err != nil {
		return err
	}
	tasks := &agent.Host{Prompt: prompts.Prompt, Keys: *agentKeys}
	if *sshListen != "" {
		ch, ln, err := sshChannel(*sshListen, *sshCA, cmpOr(*sshHostKey, filepath.Join(*state, "ssh-host-key")), log,
			func(ev wire.Event) { p.Emit(ev) })
		if err != nil {
			return err
		}
		defer ch.Server().Close()
		channels = append(channels, ch)
		serveSSH = func() {
			// A listener lost behind the Probe's back is bound again by self-heal (listener_lost → rebind).
			p.ServeListener(ctx, ch.Name(), ln, ch.Server().Serve, func(a net.Addr) { log.Info("ssh listening", "addr", a.String(), "rebound", true) })
		}
		log.Info("ssh listening", "addr", ln.Addr().String())
	}
	if *dialogOn {
		streams, err := wire.NewDialogClients(*host, strings.Split(*gw, ","), tc)
		if err != nil {
			return err
		}
		df := dialogfwd.New(streams, func() int64 { return p.Epoch() }, log)
		channels = append(channels, df)
		tasks.Approvals = df.Open
		startDialog = func() { go df.Run(ctx) }
	}
	p = probe.New(probe.Config{Host: *host, Slots: *slots, StateDir: *state, Supervise: *supervise, Channels: channels, Tasks: tasks,
		Heal: probe.HealPolicy{MaxAttempts: *healAttempts, Backoff: *healBackoff, MaxBackoff: *healMaxBackoff}}, client, probe.NewHostRuntime(runtimes))
	if serveSSH != nil {
		go serveSSH() // once p is there: the channel's activity goes to its events
	}
	startDialog() // once p is there: its streams carry p's epoch
	log.Info("serving", "host", *host, "gateway", *gw, "runtimes", fmt.Sprint(keys(runtimes)))
	err = p.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// parseGuestFwd reads --guest-fwd GUESTPORT=HOSTPORT values.
func parseGuestFwd(vals []string) (map[int]int, error) {
	out := map[int]int{}
	for _, v := range vals {
		g, h, ok := strings.Cut(v, "=")
		gp, err1 := strconv.Atoi(g)
		hp, err2 := strconv.Atoi(h)
		if !ok || err1 != nil || err2 != nil || gp < 1 || gp > 65535 || hp < 1 || hp > 65535 {
			return nil, fmt.Errorf("serve: --guest-fwd %q: use GUESTPORT=HOSTPORT, e.g. 8080=18080", v)
		}
		out[gp] = hp
	}
	return out, nil
}

func keys(m map[string]probe.Runtime) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func status(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("probe status", flag.ContinueOnError)
	state := fs.String("state", "", "the Probe's state directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *state == "" {
		return errors.New("status: --state is required")
	}
	b, err := os.ReadFile(filepath.Join(*state, probe.StatusFile))
	if err != nil {
		return fmt.Errorf("status: %w (is `probe serve --state %s` running?)", err, *state)
	}
	_, err = stdout.Write(b)
	return err
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
