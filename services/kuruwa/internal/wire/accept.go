package wire

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Accept waits for the next connection on ln. An error that passes (no descriptor or memory
// left for the connection, a connection reset before it was taken) is waited out, with a backoff
// from 5 ms to 1 s, as net/http's server does: a daemon that stopped accepting for good at the
// first one would let any client that can fill the descriptor table shut it for everyone. Any
// other error, the listener's close among them, is returned.
func Accept(ln net.Listener) (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err == nil || !passes(err) {
			return c, err
		}
		delay = min(max(2*delay, 5*time.Millisecond), time.Second)
		time.Sleep(delay)
	}
}

func passes(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
