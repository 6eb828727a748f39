package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/allox-os/allox/deploy/probe/internal/gateway"
	"github.com/allox-os/allox/deploy/probe/internal/pki"
)

func serve(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("gateway serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7443", "address of the mutual-TLS API")
	data := fs.String("data", "", "directory of the embedded etcd (the default control plane)")
	etcdListen := fs.String("etcd-listen", "127.0.0.1:2379", "client address of the embedded etcd (other replicas use it with --etcd)")
	endpoints := fs.String("etcd", "", "comma-separated endpoints of an existing etcd cluster (instead of --data)")
	pkiDir := fs.String("pki", "", "directory with ca.pem, server.pem and server-key.pem (gateway ca)")
	replica := fs.String("replica", "", "name of this replica (default: the host name and the listen address)")
	var cfg gateway.Config
	fs.DurationVar(&cfg.RenewEvery, "renew-every", 2500*time.Millisecond, "heartbeat cadence asked of Probes")
	fs.DurationVar(&cfg.StopAfter, "stop-after", 7*time.Second, "a Probe fences itself after this long without renewal")
	fs.DurationVar(&cfg.LostAfter, "lost-after", 10*time.Second, "the Gateway reassigns after this long without renewal (whole seconds)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*data == "") == (*endpoints == "") {
		return errors.New("serve: pass exactly one of --data DIR (embedded etcd) or --etcd ENDPOINTS")
	}
	if *pkiDir == "" {
		return errors.New("serve: --pki DIR is required (make one with `gateway ca init` and `gateway ca issue --role gateway`)")
	}
	tc, err := pki.ServerConfig(filepath.Join(*pkiDir, pki.CAFile), filepath.Join(*pkiDir, "server.pem"), filepath.Join(*pkiDir, "server-key.pem"))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if cfg.SSHCA, err = loadSSHCA(*pkiDir); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	eps := strings.Split(*endpoints, ",")
	if *data != "" {
		e, err := gateway.StartEmbedded(*data, *etcdListen)
		if err != nil {
			return err
		}
		defer e.Close()
		eps = []string{e.Endpoint}
		log.Info("embedded etcd", "endpoint", e.Endpoint, "data", *data)
	}
	cli, err := gateway.Connect(eps)
	if err != nil {
		return err
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	if cfg.Replica = *replica; cfg.Replica == "" {
		h, _ := os.Hostname()
		cfg.Replica = h + "/" + ln.Addr().String()
	}
	g, err := gateway.New(cli, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: g.Handler(), TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	go func() { errc <- g.RunLoops(ctx) }()
	log.Info("listening", "addr", ln.Addr().String(), "replica", cfg.Replica, "etcd", strings.Join(eps, ","))
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
