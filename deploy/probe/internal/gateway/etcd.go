package gateway

import (
	"fmt"
	"net"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Embedded is a single-node etcd inside the Gateway's process: `gateway serve` alone is a working
// control plane on one machine.
type Embedded struct {
	etcd     *embed.Etcd
	Endpoint string // client URL, e.g. http://127.0.0.1:2379
}

// StartEmbedded starts etcd with its data in dir, serving clients on listen ("127.0.0.1:0" picks a
// free port).
func StartEmbedded(dir, listen string) (*Embedded, error) {
	client, err := resolve(listen)
	if err != nil {
		return nil, fmt.Errorf("--etcd-listen %s: %w", listen, err)
	}
	peer, err := resolve("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "gateway"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop()) // the library does not log
	cu, pu := url.URL{Scheme: "http", Host: client}, url.URL{Scheme: "http", Host: peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s did not become ready in 60s", dir)
	}
	return &Embedded{etcd: e, Endpoint: cu.String()}, nil
}

// Close stops etcd.
func (e *Embedded) Close() { e.etcd.Close() }

// Connect returns a client of the etcd cluster at endpoints.
func Connect(endpoints []string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("--etcd %v: %w", endpoints, err)
	}
	return c, nil
}

// resolve turns host:0 into host:<a free port>.
func resolve(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return addr, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
