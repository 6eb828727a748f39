package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/pkg/sftp"
)

// relayCmd is "allox relay [--ready] tcp HOST PORT" and "allox relay [--ready] unix PATH": stdin
// goes to a connection the run itself makes, and what comes back to stdout. It is how a remote
// IDE's forwarded connections (SSH direct-tcpip, direct-streamlocal) reach a server in the
// session: the connection is made inside the sandbox, with the run's identity, network namespace
// and view of the files, so it reaches exactly what the session's runs reach. --ready writes
// RelayReady to stdout once connected, before any relayed byte, so that a caller can accept the
// forward only then.
func relayCmd(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	ready := len(args) > 0 && args[0] == "--ready"
	if ready {
		args = args[1:]
	}
	var network, addr string
	switch {
	case len(args) == 3 && args[0] == "tcp":
		port, err := strconv.Atoi(args[2])
		if err != nil || port < 1 || port > 65535 {
			return usagef("allox relay tcp %s %s: PORT must be a TCP port, 1 to 65535", args[1], args[2])
		}
		network, addr = "tcp", net.JoinHostPort(args[1], strconv.Itoa(port))
	case len(args) == 2 && args[0] == "unix":
		network, addr = "unix", args[1]
	default:
		return usagef("use: allox relay [--ready] tcp HOST PORT, or allox relay [--ready] unix PATH")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return fmt.Errorf("relay %s %s: %s", network, addr, oneLine(err.Error()))
	}
	if ready {
		fmt.Fprint(c.stdout, RelayReady)
	}
	if err := relay(conn, stdin, c.stdout); err != nil {
		return fmt.Errorf("relay %s %s: %s", network, addr, oneLine(err.Error()))
	}
	return nil
}

// RelayReady is what allox relay --ready writes to stdout once its connection is made.
const RelayReady = "allox-relay: connected\n"

// sftpServerCmd is "allox sftp-server": the SFTP protocol on stdin and stdout, serving the run's
// own view of the files as the run's user (what OpenSSH's sftp-server is to sshd).
func sftpServerCmd(_ context.Context, c *caller, args []string, stdin io.Reader) error {
	if len(args) != 0 {
		return usagef("use: allox sftp-server (it speaks SFTP on stdin and stdout)")
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	s, err := sftp.NewServer(stdio{stdin, c.stdout}, sftp.WithServerWorkingDirectory(wd))
	if err != nil {
		return err
	}
	if err := s.Serve(); err != nil && err != io.EOF {
		return fmt.Errorf("sftp-server: %w", err)
	}
	return nil
}

// stdio is stdin and stdout as one stream.
type stdio struct {
	io.Reader
	io.Writer
}

func (stdio) Close() error { return nil }
