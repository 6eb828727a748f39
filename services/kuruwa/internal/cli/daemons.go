package cli

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/allox-os/allox/services/kuruwa/internal/config"
	"github.com/allox-os/allox/services/kuruwa/internal/daemon"
	"github.com/allox-os/allox/services/kuruwa/internal/instance"
)

func runDaemon(ctx context.Context, c *Context, inv *invocation) error {
	dir := inv.one("dir")
	if dir == "" {
		return usagef("daemon needs --dir DIR: the project's runtime directory (entries, instance sockets, state), e.g. --dir $XDG_RUNTIME_DIR/kuruwa/myproject")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	cfg, err := config.Load(inv.one("config"), config.Vars{RuntimeDir: abs, Kuruwa: self}, c.Stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if inv.has("verbose") {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(c.Stderr, &slog.HandlerOptions{Level: level}))
	d, err := daemon.New(cfg, abs, self, log)
	if err != nil {
		return err
	}
	return d.Run(ctx, func() {
		fmt.Fprintf(c.Stdout, "management entry: %s\n", d.ManagementEntry())
		for _, name := range slices.Sorted(maps.Keys(cfg.Tenants)) {
			fmt.Fprintf(c.Stdout, "tenant %s entry: %s\n", name, d.TenantEntry(name))
		}
	})
}

func runInstanceDaemon(ctx context.Context, c *Context, inv *invocation) error {
	id := inv.one("id")
	if id == "" {
		return usagef("instance-daemon needs --id (it is started by the main daemon)")
	}
	ad, err := instance.Adopt()
	if err != nil {
		return err
	}
	return instance.NewServer(id, ad.State).Serve(ctx, ad.Listener)
}
