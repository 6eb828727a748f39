package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// actionNetworkConnect is the session-network plugin's raw TCP relay.
const actionNetworkConnect = "network.connect"

// networkConnect is "allox network connect HOST PORT": stdin goes to a TCP connection the daemon's
// broker makes to HOST:PORT, and what comes back goes to stdout, so that it serves as
// ssh -o ProxyCommand='allox network connect %h %p'. stdin's end half-closes the connection (the
// destination reads EOF and may still answer); the relay ends when the destination's side ends.
func networkConnect(ctx context.Context, c *caller, args []string, stdin io.Reader) error {
	if len(args) != 2 {
		return usagef("use: allox network connect HOST PORT, e.g. allox network connect github.com 22")
	}
	port, err := strconv.Atoi(args[1])
	if err != nil || port < 1 || port > 65535 {
		return usagef("allox network connect %s %s: PORT must be a TCP port, 1 to 65535, e.g. 22", args[0], args[1])
	}
	s, err := c.client.Stream(ctx, actionNetworkConnect, map[string]any{"host": args[0], "port": port})
	if err != nil {
		return c.explain(actionNetworkConnect, err)
	}
	if err := relay(s, stdin, c.stdout); err != nil {
		return fmt.Errorf("network connect %s %d: %s", args[0], port, oneLine(err.Error()))
	}
	return nil
}

// relay copies in to s and s to out. When in ends, s's write side is half-closed; relay returns
// once s's read side has ended (the destination is done), closing s.
func relay(s io.ReadWriteCloser, in io.Reader, out io.Writer) error {
	defer s.Close()
	up := make(chan error, 1)
	go func() {
		_, err := io.Copy(s, in)
		if err == nil {
			if cw, ok := s.(interface{ CloseWrite() error }); ok {
				err = cw.CloseWrite()
			}
		}
		up <- err
	}()
	_, err := io.Copy(out, s)
	select {
	case uerr := <-up: // stdin had ended (or failed) already
		if err == nil && uerr != nil && !errors.Is(uerr, io.ErrClosedPipe) {
			err = fmt.Errorf("send: %w", uerr)
		}
	default: // the destination is done while stdin is still open: nothing more can be said to it
	}
	return err
}
