package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ShutdownTimeout bounds how long calls in flight may run once shutdown starts.
const ShutdownTimeout = 10 * time.Second

// Serve runs the loopback listener and, when configured and a token is present, the host listener,
// until ctx is cancelled; then it stops accepting, lets calls in flight finish and returns nil.
// A --listen-host without a token (missing or empty --token-file) is logged loudly and skipped.
func Serve(ctx context.Context, cfg Config, router *Router, log *slog.Logger) error {
	token := ""
	if cfg.ListenHost != "" {
		var err error
		if token, err = LoadToken(cfg.TokenFile); err != nil {
			return err
		}
		if token == "" {
			log.LogAttrs(ctx, slog.LevelWarn, "HOST LISTENER NOT STARTED: no token; serving loopback only",
				slog.String("listen_host", cfg.ListenHost), slog.String("token_file", cfg.TokenFile),
				slog.String("fix", "the host must pass the RPC token to the guest (fw_cfg), which init writes to the token file"))
		}
	}
	servers := []*listener{{origin: Loopback, addr: cfg.Listen}}
	if token != "" {
		servers = append(servers, &listener{origin: Host, addr: cfg.ListenHost, token: token})
	}
	for _, l := range servers {
		if err := l.listen(ctx, router, log); err != nil {
			closeAll(servers)
			return err
		}
	}
	errc := make(chan error, len(servers))
	for _, l := range servers {
		go func() { errc <- l.serve() }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.LogAttrs(ctx, slog.LevelInfo, "shutting down", slog.Duration("timeout", ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	for _, l := range servers {
		if serr := l.srv.Shutdown(sctx); serr != nil {
			err = errors.Join(err, fmt.Errorf("shut down %s listener: %w", l.origin, serr))
		}
	}
	return err
}

type listener struct {
	origin Origin
	addr   string
	token  string
	ln     net.Listener
	srv    *http.Server
}

func (l *listener) listen(ctx context.Context, router *Router, log *slog.Logger) error {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", l.origin, err)
	}
	l.ln = ln
	l.srv = &http.Server{
		Handler:           NewHandler(router, l.origin, l.token, log),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Calls in flight finish when shutdown starts rather than being cancelled.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	log.LogAttrs(ctx, slog.LevelInfo, "listening", slog.String("listener", l.origin.String()),
		slog.String("addr", ln.Addr().String()), slog.Bool("authenticated", l.token != ""))
	return nil
}

func (l *listener) serve() error {
	if err := l.srv.Serve(l.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s listener: %w", l.origin, err)
	}
	return nil
}

func closeAll(ls []*listener) {
	for _, l := range ls {
		if l.ln != nil {
			l.ln.Close()
		}
	}
}
