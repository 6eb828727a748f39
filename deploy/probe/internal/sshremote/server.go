package sshremote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/allox-os/allox/deploy/probe/internal/sshcert"
	"github.com/allox-os/allox/internal/rpc"
)

// Appliance is what the endpoint needs of a session's Worker Sandbox: runs attached to the
// caller (the appliance's process.exec, e.g. an *rpc.Client on its host listener).
type Appliance interface {
	Exec(ctx context.Context, params any) (*rpc.Exec, error)
	// Stream runs a stream action (session.ssh_agent and session.ssh_agent_conn: agent forwarding).
	Stream(ctx context.Context, action string, params any) (io.ReadWriteCloser, error)
}

// Activity is one connection or channel, reported when it ends (a connection also when it is
// admitted, with End zero). Metadata only: never a command line, a path's content or a byte of
// the streams.
type Activity struct {
	Who     string // the certificate's key id (the Gateway names the person and the approval)
	Agent   string
	Session string
	Remote  string // the client's address
	Channel string // connection, shell, exec, sftp, direct-tcpip, direct-streamlocal, auth-agent
	Target  string // a forward's destination (host:port, or the socket's path)
	RunID   string // the run that served the channel
	Start   time.Time
	End     time.Time
	Exit    *int   // a run's exit status
	Error   string // why it was refused or failed
}

// Config configures a Server.
type Config struct {
	HostKey ssh.Signer
	// UserCAs are the Gateway's certificate authorities: a login needs a user certificate signed
	// by one of them.
	UserCAs []ssh.PublicKey
	// Appliance resolves a session to its appliance; an error refuses the login.
	Appliance func(agent, session string) (Appliance, error)
	// Activity, if set, gets every Activity.
	Activity func(Activity)
	// MaxLifetime is the longest validity a certificate may have (default 12 h): a certificate
	// valid for longer, or forever, is refused however it was signed.
	MaxLifetime time.Duration
	// Shell runs a shell channel (login shell) and an exec channel's command (Shell -c COMMAND),
	// as sshd does with the user's shell. Default /bin/sh, which every image has (the appliance's
	// is busybox's; bash is not in its userland).
	Shell string
	// Client is the allox client inside runs (sftp-server, relay). Default /run/allox/bin/allox.
	Client string
	Now    func() time.Time
	Log    *slog.Logger
}

// Server is the SSH endpoint.
type Server struct {
	cfg Config
	ssh *ssh.ServerConfig

	mu     sync.Mutex
	conns  map[*ssh.ServerConn]struct{}
	closed bool

	fallbacks fallbacks // the sessions' persistent terminals (terminal_fallback)
}

// New checks cfg and makes the server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.HostKey == nil:
		return nil, errors.New("sshremote: Config.HostKey is required")
	case len(cfg.UserCAs) == 0:
		return nil, errors.New("sshremote: Config.UserCAs is required: the Gateway's SSH certificate authority")
	case cfg.Appliance == nil:
		return nil, errors.New("sshremote: Config.Appliance is required")
	}
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = sshcert.MaxLifetime
	}
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
	}
	if cfg.Client == "" {
		cfg.Client = "/run/allox/bin/allox"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, conns: map[*ssh.ServerConn]struct{}{}}
	s.ssh = &ssh.ServerConfig{PublicKeyCallback: s.authenticate, ServerVersion: "SSH-2.0-allox-probe"}
	s.ssh.AddHostKey(cfg.HostKey)
	return s, nil
}

// authenticate admits a user certificate of the Gateway's, within its validity (never longer
// than MaxLifetime), for the session the login names, and nothing else.
func (s *Server) authenticate(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	cert, ok := key.(*ssh.Certificate)
	if !ok {
		return nil, errors.New("only a user certificate signed by the Gateway is accepted; ask the Gateway for one")
	}
	checker := ssh.CertChecker{
		IsUserAuthority: func(auth ssh.PublicKey) bool {
			for _, ca := range s.cfg.UserCAs {
				if bytes.Equal(auth.Marshal(), ca.Marshal()) {
					return true
				}
			}
			return false
		},
		Clock: s.cfg.Now,
	}
	perms, err := checker.Authenticate(meta, key)
	if err != nil {
		return nil, err
	}
	if cert.ValidBefore == ssh.CertTimeInfinity || cert.ValidBefore < cert.ValidAfter ||
		time.Duration(cert.ValidBefore-cert.ValidAfter)*time.Second > s.cfg.MaxLifetime {
		return nil, fmt.Errorf("certificate %q is valid for longer than %s: the Gateway issues short-lived ones", cert.KeyId, s.cfg.MaxLifetime)
	}
	agent, session, ok := strings.Cut(meta.User(), "+")
	if !ok || agent == "" || session == "" {
		return nil, fmt.Errorf("login %q: log in as AGENT+SESSION", meta.User())
	}
	if _, err := s.cfg.Appliance(agent, session); err != nil {
		return nil, fmt.Errorf("session %s: %w", meta.User(), err)
	}
	if perms.Extensions == nil {
		perms.Extensions = map[string]string{}
	}
	perms.Extensions[keyWho] = cert.KeyId
	return perms, nil
}

// Private permission keys (certificate extensions are "name" or "name@domain").
const keyWho = "allox who"

// Serve accepts connections on ln until it fails or Close.
func (s *Server) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		go s.ServeConn(c)
	}
}

// Close ends every connection (their runs are killed by their appliances as callers gone) and
// makes Serve return once its listener is closed by the caller.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[*ssh.ServerConn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	s.fallbacks.mu.Lock()
	for _, f := range s.fallbacks.terms {
		f.t.Signal(syscall.SIGKILL) // closes the run's stream: the appliance kills the run
	}
	s.fallbacks.mu.Unlock()
	return nil
}

// conn is one admitted connection.
type conn struct {
	s         *Server
	sc        *ssh.ServerConn
	who       string
	agent     string
	session   string
	appliance Appliance
	perms     *ssh.Permissions
	fwd       agentForward // ssh -A
}

func (c *conn) activity(a Activity) {
	a.Who, a.Agent, a.Session, a.Remote = c.who, c.agent, c.session, c.sc.RemoteAddr().String()
	if c.s.cfg.Activity != nil {
		c.s.cfg.Activity(a)
	}
}

// ServeConn serves one client connection.
func (s *Server) ServeConn(nc net.Conn) {
	start := s.cfg.Now()
	nc.SetDeadline(time.Now().Add(30 * time.Second)) // the handshake and authentication
	sc, chans, reqs, err := ssh.NewServerConn(nc, s.ssh)
	if err != nil {
		s.cfg.Log.Info("ssh login refused", "remote", nc.RemoteAddr().String(), "error", err.Error())
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		sc.Close()
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	agent, session, _ := strings.Cut(sc.User(), "+")
	c := &conn{s: s, sc: sc, who: sc.Permissions.Extensions[keyWho], agent: agent, session: session, perms: sc.Permissions}
	c.appliance, err = s.cfg.Appliance(agent, session)
	if err != nil {
		sc.Close()
		return
	}
	c.activity(Activity{Channel: "connection", Start: start})
	go ssh.DiscardRequests(reqs) // tcpip-forward, keepalives: refused (keepalives need only the reply)
	var wg sync.WaitGroup
	for nch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.channel(nch)
		}()
	}
	wg.Wait()
	c.endAgent()
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
	c.activity(Activity{Channel: "connection", Start: start, End: s.cfg.Now()})
}

func (c *conn) channel(nch ssh.NewChannel) {
	switch nch.ChannelType() {
	case "session":
		c.sessionChannel(nch)
	case "direct-tcpip":
		var p struct {
			Host     string
			Port     uint32
			OrigHost string
			OrigPort uint32
		}
		if err := ssh.Unmarshal(nch.ExtraData(), &p); err != nil || p.Port == 0 || p.Port > 65535 {
			nch.Reject(ssh.ConnectionFailed, "direct-tcpip: malformed request")
			return
		}
		c.forward(nch, "direct-tcpip", net.JoinHostPort(p.Host, strconv.Itoa(int(p.Port))), []string{"tcp", p.Host, strconv.Itoa(int(p.Port))})
	case "direct-streamlocal@openssh.com":
		var p struct {
			Path      string
			Reserved  string
			Reserved2 uint32
		}
		if err := ssh.Unmarshal(nch.ExtraData(), &p); err != nil || p.Path == "" {
			nch.Reject(ssh.ConnectionFailed, "direct-streamlocal: malformed request")
			return
		}
		c.forward(nch, "direct-streamlocal", p.Path, []string{"unix", p.Path})
	default:
		nch.Reject(ssh.UnknownChannelType, "channel type "+nch.ChannelType()+" is not served: use session, direct-tcpip or direct-streamlocal@openssh.com")
	}
}

func (c *conn) permitted(ext string) bool {
	_, ok := c.perms.Extensions[ext]
	return ok
}

// exec starts a run of the session attached to the caller, with the connection's forwarded
// agent if sshAgent names it.
func (c *conn) exec(ctx context.Context, argv []string, env map[string]string, term *rpc.ExecTerminal, sshAgent string) (*rpc.Exec, error) {
	params := map[string]any{"agent_id": c.agent, "session_id": c.session, "argv": argv}
	if sshAgent != "" {
		params["ssh_agent"] = sshAgent
	}
	if len(env) > 0 {
		params["env"] = env
	}
	if term != nil {
		params["terminal"] = term
	}
	return c.appliance.Exec(ctx, params)
}

// forward serves a direct-tcpip or direct-streamlocal channel with allox relay inside the
// sandbox: the channel is accepted only once the relay has connected, else rejected with why.
func (c *conn) forward(nch ssh.NewChannel, kind, target string, relayArgs []string) {
	a := Activity{Channel: kind, Target: target, Start: c.s.cfg.Now()}
	defer func() { a.End = c.s.cfg.Now(); c.activity(a) }()
	if !c.permitted("permit-port-forwarding") {
		a.Error = "the certificate does not permit port forwarding"
		nch.Reject(ssh.Prohibited, a.Error)
		return
	}
	x, err := c.exec(context.Background(), append([]string{c.s.cfg.Client, "relay", "--ready"}, relayArgs...), nil, nil, "")
	if err != nil {
		a.Error = err.Error()
		nch.Reject(ssh.ConnectionFailed, a.Error)
		return
	}
	defer x.Close()
	a.RunID = x.Run.RunID
	stderr := &tail{max: 4096}
	errDone := make(chan struct{})
	go func() { io.Copy(stderr, x.Stderr); close(errDone) }()
	ready := make([]byte, len(relayReady))
	if _, err := io.ReadFull(x.Stdout, ready); err != nil || string(ready) != relayReady {
		<-errDone
		a.Error = strings.TrimSpace(stderr.String())
		if a.Error == "" {
			a.Error = "the relay in the sandbox did not connect"
		}
		nch.Reject(ssh.ConnectionFailed, a.Error)
		return
	}
	ch, reqs, err := nch.Accept()
	if err != nil {
		a.Error = err.Error()
		return
	}
	go ssh.DiscardRequests(reqs)
	go func() {
		if _, err := io.Copy(x, ch); err == nil {
			x.CloseStdin()
		}
	}()
	io.Copy(ch, x.Stdout)
	ch.CloseWrite()
	<-errDone
	if r, err := x.Wait(context.Background()); err == nil {
		a.Exit = r.ExitCode
	}
	ch.Close()
}

// relayReady is allox relay --ready's first output (services/allox: RelayReady).
const relayReady = "allox-relay: connected\n"

// sessionChannel serves a session channel: its pty-req, env and window-change requests, and one
// shell, exec or sftp subsystem as a run of the session.
func (c *conn) sessionChannel(nch ssh.NewChannel) {
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	a := Activity{Start: c.s.cfg.Now()}
	var (
		term    *rpc.ExecTerminal
		env     = map[string]string{}
		x       *rpc.Exec
		done    = make(chan struct{})
		started bool
		agentID string // the connection's forwarded agent, once this channel asked for it
	)
	for {
		var req *ssh.Request
		select {
		case req = <-reqs:
		case <-done:
		}
		if req == nil { // the client closed the channel, or the run ended
			break
		}
		ok := false
		switch req.Type {
		case "pty-req":
			var p struct {
				Term          string
				Cols, Rows    uint32
				Width, Height uint32
				Modes         string
			}
			if err := ssh.Unmarshal(req.Payload, &p); err == nil && !started && c.permitted("permit-pty") {
				term, ok = &rpc.ExecTerminal{Rows: clampSize(p.Rows), Cols: clampSize(p.Cols), Term: p.Term}, true
			}
		case "env":
			var p struct{ Name, Value string }
			if err := ssh.Unmarshal(req.Payload, &p); err == nil && !started && (acceptEnv(p.Name) || p.Name == FallbackEnv) {
				env[p.Name], ok = p.Value, true
			}
		case "auth-agent-req@openssh.com":
			switch {
			case started:
			case !c.permitted("permit-agent-forwarding"):
				fmt.Fprintf(ch.Stderr(), "allox: agent forwarding refused: the certificate does not permit it (ask the Gateway for one with --agent-forwarding)\r\n")
			default:
				id, err := c.forwardAgent()
				if err != nil {
					c.s.cfg.Log.Warn("ssh agent forwarding failed", "login", c.sc.User(), "error", err.Error())
					fmt.Fprintf(ch.Stderr(), "allox: agent forwarding failed: %s\r\n", oneLine(err.Error()))
					break
				}
				agentID, ok = id, true
			}
		case "window-change":
			var p struct{ Cols, Rows, Width, Height uint32 }
			if err := ssh.Unmarshal(req.Payload, &p); err == nil && x != nil && term != nil {
				ok = x.Resize(clampSize(p.Rows), clampSize(p.Cols)) == nil
			}
		case "shell", "exec", "subsystem":
			if started {
				break
			}
			if name, ok := env[FallbackEnv]; ok && req.Type == "shell" {
				a.Channel, a.Target = "terminal_fallback", name
				switch {
				case !terminalName.MatchString(name):
					a.Error = fmt.Sprintf("%s=%q: name the terminal with letters, digits, '.', '_', '-' (at most 64)", FallbackEnv, name)
				case term == nil:
					a.Error = "a persistent terminal needs a terminal: ssh -t"
				}
				if a.Error != "" {
					fmt.Fprintf(ch.Stderr(), "allox: %s\r\n", a.Error)
					break
				}
				if req.WantReply {
					req.Reply(true, nil)
				}
				delete(env, FallbackEnv)
				c.attachFallback(ch, reqs, name, term, env, &a)
				a.End = c.s.cfg.Now()
				c.activity(a)
				return
			}
			argv, kind, why := c.command(req)
			if argv == nil {
				a.Channel, a.Error = kind, why
				break
			}
			a.Channel = kind
			if kind == "sftp" {
				term = nil // a subsystem speaks its protocol on the channel, never on a terminal
			}
			x, err = c.exec(context.Background(), argv, env, term, agentID)
			if err != nil {
				a.Error = err.Error()
				fmt.Fprintf(ch.Stderr(), "allox: %s\r\n", oneLine(err.Error()))
				break
			}
			started, ok = true, true
			a.RunID = x.Run.RunID
			go c.pump(ch, x, &a, done)
		}
		if req.WantReply {
			req.Reply(ok, nil)
		}
		if a.Error != "" && !started && (req.Type == "shell" || req.Type == "exec" || req.Type == "subsystem") {
			break
		}
	}
	go ssh.DiscardRequests(reqs) // whatever comes after the channel's run
	if x != nil {
		x.Close() // before the run's end: the caller is gone and the appliance kills the run
		<-done
	}
	a.End = c.s.cfg.Now()
	c.activity(a)
}

// command is the argv a shell, exec or subsystem request runs, the channel's kind, or why not.
func (c *conn) command(req *ssh.Request) ([]string, string, string) {
	switch req.Type {
	case "shell":
		return []string{c.s.cfg.Shell, "-l"}, "shell", ""
	case "exec":
		var p struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			return nil, "exec", "malformed exec request"
		}
		return []string{c.s.cfg.Shell, "-c", p.Command}, "exec", ""
	default:
		var p struct{ Name string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil || p.Name != "sftp" {
			return nil, "subsystem", fmt.Sprintf("subsystem %q is not served: only sftp", p.Name)
		}
		return []string{c.s.cfg.Client, "sftp-server"}, "sftp", ""
	}
}

// pump carries a started run's streams over the channel, then its exit status, and closes done.
func (c *conn) pump(ch ssh.Channel, x *rpc.Exec, a *Activity, done chan<- struct{}) {
	defer close(done)
	go func() {
		if _, err := io.Copy(x, ch); err == nil {
			x.CloseStdin()
		}
	}()
	var out sync.WaitGroup
	out.Add(2)
	go func() { defer out.Done(); io.Copy(ch, x.Stdout) }()
	go func() { defer out.Done(); io.Copy(ch.Stderr(), x.Stderr) }()
	out.Wait()
	r, err := x.Wait(context.Background())
	if err != nil {
		a.Error = err.Error()
		return
	}
	ch.CloseWrite()
	a.Exit = r.ExitCode
	if sig := signalName(r.Signal); sig != "" {
		ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Message    string
			Lang       string
		}{Signal: sig}))
	} else if r.ExitCode != nil {
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(*r.ExitCode)}))
	}
	ch.Close()
}

// signalName is the SSH name ("KILL") of a run's Signal ("killed", as Go spells it), or "".
func signalName(s string) string {
	if n := rpc.SignalNumber(s); n != 0 {
		return strings.TrimPrefix(unix.SignalName(n), "SIG")
	}
	return ""
}

// acceptEnv is what a client may set in its runs' environment, as Debian's sshd accepts.
func acceptEnv(name string) bool {
	return name == "LANG" || strings.HasPrefix(name, "LC_")
}

// clampSize bounds a terminal dimension to what a terminal takes (1 to 65535; 0 is "unknown").
func clampSize(n uint32) uint16 {
	switch {
	case n == 0:
		return 24
	case n > 65535:
		return 65535
	}
	return uint16(n)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// tail keeps the first max bytes written to it.
type tail struct {
	max int
	b   bytes.Buffer
}

func (t *tail) Write(p []byte) (int, error) {
	if room := t.max - t.b.Len(); room > 0 {
		t.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (t *tail) String() string { return t.b.String() }
