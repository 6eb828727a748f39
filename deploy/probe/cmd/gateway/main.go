// Command gateway is the control plane of the Probes: DevBox and session specs, scheduling,
// leases with fencing epochs, desired state and metadata-only audit, in etcd (embedded by default).
//
//	gateway serve   [--data DIR | --etcd URLS] --pki DIR [--listen ADDR]   run a replica
//	gateway ca init --dir DIR                                              make the CA
//	gateway ca issue --dir DIR --name N --role probe|admin|gateway [--host H]   mint a certificate
//	gateway apply FILE.hcl | get NAME | list | leases | audit              operate (admin certificate)
//	gateway op checkpoint|rollback|vm_snapshot DEVBOX [...]                act on a session
//	gateway ca ssh-init --dir DIR                                          make the SSH CA (ssh_remote)
//	gateway ssh-cert --key F.pub --who W --approval REF DEVBOX SESSION     a short-lived SSH credential
//	gateway dialog ls [--all]                                              the open dialog requests
//	gateway dialog answer --devbox D --session S REQUEST_ID CHOICE         answer one
//	gateway task --devbox D --session S --cli C [--model-url U] PROMPT|-   a task for the session's agent
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError()
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "gateway")
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], log)
	case "ca":
		return ca(args[1:], stdout)
	case "apply", "get", "list", "leases", "audit", "op", "ssh-cert", "task":
		return operate(ctx, args[0], args[1:], stdout)
	case "dialog":
		if len(args) < 2 || (args[1] != "ls" && args[1] != "answer") {
			return fmt.Errorf("usage: gateway dialog ls [--all] | gateway dialog answer --devbox D --session S REQUEST_ID CHOICE")
		}
		return operate(ctx, "dialog-"+args[1], args[2:], stdout)
	}
	return usageError()
}

func usageError() error {
	return fmt.Errorf("usage: gateway serve|ca|apply|get|list|leases|audit|op|ssh-cert|dialog|task (see `go doc ./deploy/probe/cmd/gateway`)")
}
