// Command kuruwad is Kuruwa's daemons: "kuruwad daemon" is a project's main daemon, and
// "kuruwad instance-daemon" is what a sandbox definition's init runs in the final environment.
// They live apart from the kuruwa CLI so that every CLI call starts a small program.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/daemon"
	"github.com/allox-os/allox/services/kuruwa/internal/instance"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "kuruwad:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: kuruwad daemon --dir DIR [--config FILE] | kuruwad instance-daemon --id ID")
	}
	fs := flag.NewFlagSet("kuruwad "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch args[0] {
	case "daemon":
		dir := fs.String("dir", "", "the project's runtime directory: entries, instance sockets, state")
		cfgPath := fs.String("config", "", "the HCL configuration: definitions and tenants")
		verbose := fs.Bool("verbose", false, "log every connection")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return runDaemon(ctx, *dir, *cfgPath, *verbose, stdout, stderr)
	case "instance-daemon":
		id := fs.String("id", "", "the instance id the main daemon assigned")
		alloxDaemon := fs.String("allox-daemon", "", "an allox_session instance's workspace daemon: every terminal is a run of --agent's --session")
		tokenFile := fs.String("allox-token-file", "", "the workspace daemon's bearer token")
		agent := fs.String("agent", "", "the Allox agent")
		session := fs.String("session", "", "the Allox session")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *id == "" {
			return errors.New("instance-daemon needs --id; the main daemon starts it, not a person")
		}
		var spawner *instance.SessionSpawner
		if *alloxDaemon != "" {
			if *agent == "" || *session == "" {
				return errors.New("instance-daemon --allox-daemon needs --agent and --session")
			}
			c, err := daemon.SessionClient(&config.SessionDef{Daemon: *alloxDaemon, TokenFile: *tokenFile})
			if err != nil {
				return err
			}
			spawner = &instance.SessionSpawner{Client: c, Agent: *agent, Session: *session}
		}
		ad, err := instance.Adopt()
		if err != nil {
			return err
		}
		srv := instance.NewServer(*id, ad.State)
		srv.Session = spawner
		return srv.Serve(ctx, ad.Listener)
	default:
		return fmt.Errorf("unknown command %q: use daemon or instance-daemon", args[0])
	}
}

func runDaemon(ctx context.Context, dir, cfgPath string, verbose bool, stdout, stderr io.Writer) error {
	if dir == "" {
		return errors.New("daemon needs --dir DIR: the project's runtime directory, e.g. --dir $XDG_RUNTIME_DIR/kuruwa/myproject")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	cfg, err := config.Load(cfgPath, config.Vars{RuntimeDir: abs, Kuruwa: self}, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	d, err := daemon.New(cfg, abs, self, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	if err != nil {
		return err
	}
	return d.Run(ctx, func() {
		fmt.Fprintf(stdout, "management entry: %s\n", d.ManagementEntry())
		for _, name := range slices.Sorted(maps.Keys(cfg.Tenants)) {
			fmt.Fprintf(stdout, "tenant %s entry: %s\n", name, d.TenantEntry(name))
		}
	})
}
