package main

import (
	"slices"
	"sync"
	"testing"

	"github.com/allox-os/allox/internal/daemontest"
)

// builtClient is the allox client, built static as mkimage builds it, with its python shims
// beside it (the daemon's --client).
var builtClient = sync.OnceValues(daemontest.BuildClient)

func client(t testing.TB) string {
	t.Helper()
	bin, err := builtClient()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// socketsDir is a short directory for a daemon's --session-sockets (daemontest.SocketsDir).
func socketsDir(t testing.TB) string { return daemontest.SocketsDir(t) }

// withSessionSockets gives a daemon started by a test its own --session-sockets and the built
// --client, unless the test names them: the defaults are the guest's, shared by every daemon on
// this machine.
func withSessionSockets(t testing.TB, args []string) []string {
	t.Helper()
	if !slices.Contains(args, "--session-sockets") {
		args = append(args, "--session-sockets", socketsDir(t))
	}
	if !slices.Contains(args, "--client") {
		args = append(args, "--client", client(t))
	}
	return args
}
