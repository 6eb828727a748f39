// Command system-effects-observe is the privileged system-effects observer of
// one managed execution. The workspace daemon starts it before the agent,
// drives it with JSON lines on stdin and reads one answer line per request
// on stdout:
//
//	{"op":"capture","point":"A"}  → capture every domain at A, then start the history recorder
//	{"op":"residue"}              → (between A and B, once) a managed run's main process
//	                                 exited leaving processes in its frozen group: record
//	                                 them (processes domain) before the daemon kills them
//	{"op":"capture","point":"B"}  → stop the history recorder, then capture B
//	{"op":"capture","point":"C"}  → (protocol 3) capture C after the recovery
//	{"op":"close"}                → write the manifest; the process exits 0
//
// Started with --standby alone, it prepares the history recorder's start
// (decoding the kernel's BTF, which costs more than any other step of A)
// and then takes its command line as its first request,
// {"op":"begin","args":["--evidence",...]}, answered like the others: the
// daemon keeps one standby observer ready so that a run does not wait for
// a process to start and decode the kernel's types.
//
// Each answer is {"ok":true} or {"error":"..."}. Any fault (a bad request, a
// point out of order, a write that fails, the recorder failing, stdin closed
// or a signal before close) is written to the set's fault log and answered
// with an error, and the process exits 1 leaving the set unclosed.
//
// The recorder runs only between A and B, so that its own BPF programs are
// in neither snapshot; B waits until the kernel has freed them.
//
// The observer must run in the guest's initial mount and network
// namespaces: the mounts, sysctl (net.*), network and netfilter domains
// are read from its own view.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	// An observer lives for one run and keeps what it captures: collect garbage only when the heap
	// nears 128 MiB (a workspace of 10,000 files stays far below), not at every doubling.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(128 << 20)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "system-effects-observe")
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	if err != nil {
		log.Error("observer failed", "err", err)
		os.Exit(1)
	}
}
