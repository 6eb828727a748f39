package daemon

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ShutdownTimeout bounds how long calls in flight may run once shutdown starts.
const ShutdownTimeout = 10 * time.Second

// Listeners are the daemon's bound sockets. The daemon binds them first thing, before it opens
// its store, so that its ports are its own from the first moment (and the sandbox guard keeps
// runs from binding them at any time, the daemon up or not).
type Listeners struct{ ls []*listener }

// Listen loads the host listener's token and binds every listener. With --listen-host a missing,
// empty or unreadable token is an error: a host listener that never opened is a port anyone in
// the guest could take, and with it the bearer token of the next host request.
func Listen(cfg Config) (*Listeners, error) {
	ls := &Listeners{ls: []*listener{{origin: Loopback, addr: cfg.Listen}}}
	if cfg.ListenHost != "" {
		token, err := LoadToken(cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		if token == "" {
			return nil, fmt.Errorf("--listen-host %s: no token in --token-file %s: the host listener accepts only requests "+
				"with the host's bearer token, so the daemon does not start without one: have the host pass it "+
				"(QEMU: -fw_cfg name=opt/allox/rpc-token,file=...; init writes it to the token file), or drop --listen-host", cfg.ListenHost, cfg.TokenFile)
		}
		ls.ls = append(ls.ls, &listener{origin: Host, addr: cfg.ListenHost, token: token})
	}
	for _, l := range ls.ls {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			ls.Close()
			return nil, fmt.Errorf("%s listener: %w", l.origin, err)
		}
		l.ln = ln
	}
	return ls, nil
}

// Ports are the TCP ports the listeners hold, for the sandbox guard.
func (ls *Listeners) Ports() []uint16 {
	var ports []uint16
	for _, l := range ls.ls {
		ports = append(ports, uint16(l.ln.Addr().(*net.TCPAddr).Port))
	}
	return ports
}

// Close closes every listener that is open (Serve closes them itself).
func (ls *Listeners) Close() { closeAll(ls.ls) }

// Serve serves the router on the bound listeners until ctx is cancelled; then it stops
// accepting, lets calls in flight finish and returns nil.
func Serve(ctx context.Context, ls *Listeners, router *Router, log *slog.Logger) error {
	servers := ls.ls
	for _, l := range servers {
		l.setup(ctx, router, log)
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

func (l *listener) setup(ctx context.Context, router *Router, log *slog.Logger) {
	l.srv = newServer(ctx, NewHandler(router, l.origin, l.token, log), log)
	log.LogAttrs(ctx, slog.LevelInfo, "listening", slog.String("listener", l.origin.String()),
		slog.String("addr", l.ln.Addr().String()), slog.Bool("authenticated", l.token != ""))
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

// newServer is the HTTP server of every listener, the session sockets' too.
func newServer(ctx context.Context, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Calls in flight finish when shutdown starts rather than being cancelled.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext: withPeer,
	}
}

type peerKey struct{}

// withPeer records, for a connection to an AF_UNIX socket (a session socket), the pid of the
// process that connected (SO_PEERCRED, in the daemon's pid namespace), so that a call can name
// the run it came from.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) { cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, int(cred.Pid))
}

// peerPID is the pid withPeer recorded (0: none).
func peerPID(ctx context.Context) int {
	pid, _ := ctx.Value(peerKey{}).(int)
	return pid
}
