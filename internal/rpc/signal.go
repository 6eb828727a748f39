package rpc

import "syscall"

// SignalNumber is the signal a Run's Signal names (Go's spelling, "killed"), or 0 when it names
// none.
func SignalNumber(name string) syscall.Signal {
	if name == "" {
		return 0
	}
	for n := syscall.Signal(1); n < 32; n++ {
		if n.String() == name {
			return n
		}
	}
	return 0
}
