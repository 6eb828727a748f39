//go:build allox_session_network

package main

// The session-network plugin's two components: the network namespaces (services/internal/netns)
// and the broker (services/internal/netbroker), adapted to the plugin's interfaces.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/allox-os/allox/services/internal/netbroker"
	"github.com/allox-os/allox/services/internal/netns"
	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionnet"
)

// sessionNamespaces is sessionnet.Namespaces over services/internal/netns.
// sessionNamespaces is sessionnet.Namespaces over services/internal/netns.
type sessionNamespaces struct{}

func (sessionNamespaces) Create(path string) error           { return netns.Create(path) }
func (sessionNamespaces) Open(path string) (*os.File, error) { return netns.Open(path) }
func (sessionNamespaces) Remove(path string) error           { return netns.Remove(path) }
func (sessionNamespaces) RemoveAll(dir string) error         { return netns.RemoveAll(dir) }
func (sessionNamespaces) Listen(ns *os.File, network, addr string) (net.Listener, error) {
	return netns.Listen(ns, network, addr)
}

// sessionBroker is sessionnet.Broker over *netbroker.Broker, with its audit directory.
// sessionBroker is sessionnet.Broker over services/internal/netbroker.
type sessionBroker struct {
	*netbroker.Broker
	auditDir string
}

// Dial is netbroker.Broker.Dial with its denial as sessionnet.ErrDenied.
func (b sessionBroker) Dial(ctx context.Context, agent, session, run, host string, port uint16) (sessionnet.Tunnel, error) {
	t, err := b.Broker.Dial(ctx, agent, session, run, host, port)
	if errors.Is(err, netbroker.ErrDenied) {
		return nil, fmt.Errorf("%w: %w", sessionnet.ErrDenied, err)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (b sessionBroker) Audit(q sessionnet.AuditQuery) (any, error) {
	return netbroker.ReadAudit(b.auditDir, netbroker.Query(q))
}

// newSessionBroker makes the broker over the policy file, auditing into auditDir.
// newSessionBroker makes the broker over the policy file, auditing into auditDir.
func newSessionBroker(policy, auditDir string, core plugin.Core) (sessionnet.Broker, error) {
	if err := os.MkdirAll(auditDir, 0o700); err != nil {
		return nil, err
	}
	own, err := ownAddresses()
	if err != nil {
		return nil, err
	}
	b, err := netbroker.New(netbroker.Config{PolicyPath: policy, AuditDir: auditDir, Own: own,
		AuditError: func(err error) { core.Log.Warn("session network: audit write failed", "error", err.Error()) }})
	if err != nil {
		return nil, err
	}
	return sessionBroker{Broker: b, auditDir: auditDir}, nil
}

// stopBroker has the plugin's Close also shut the broker down, after the plugin's own.
// stopBroker has the plugin's Close also shut the broker down.
func stopBroker(b sessionnet.Broker, c *plugin.Contribution) {
	closePlugin := c.Close
	c.Close = func() error {
		err := closePlugin()
		b.(sessionBroker).Shutdown()
		return err
	}
}

// ownAddresses are the guest's own addresses (every interface's, as single-address prefixes),
// which the broker denies unless a cidr rule allows them.
func ownAddresses() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("the guest's own addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				ip = ip.Unmap()
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	return out, nil
}
