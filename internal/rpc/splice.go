package rpc

import "io"

// Splice carries bytes both ways between a and b until both directions end: when one side's
// reads end, the other side's writing half is closed (CloseWrite where it has one, else Close),
// so a peer that answers after its input ended still can. It returns once both copies are done.
// Used where a stream action carries a connection (the forwarded SSH agent's streams).
func Splice(a, b io.ReadWriteCloser) {
	done := make(chan struct{})
	go func() {
		io.Copy(b, a)
		closeWrite(b)
		close(done)
	}()
	io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(c io.ReadWriteCloser) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
