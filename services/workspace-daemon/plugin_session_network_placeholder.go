//go:build allox_session_network

package main

// PLACEHOLDER, for the merge: this file stands in for the concrete network namespaces
// (services/internal/netns) and broker (services/internal/netbroker), which are built on other
// branches. Replace it with the adapters over those packages (see the session-network report);
// until then the plugin refuses to open, naming this file.

import (
	"errors"
	"net"
	"os"

	"github.com/allox-os/allox/services/internal/plugin"
	"github.com/allox-os/allox/services/internal/sessionnet"
)

var errPlaceholder = errors.New("this daemon was built with the session-network placeholder (services/workspace-daemon/plugin_session_network_placeholder.go) instead of the network namespaces and the broker: build it from a tree that has services/internal/netns and services/internal/netbroker")

// sessionNamespaces is sessionnet.Namespaces over services/internal/netns.
type sessionNamespaces struct{}

func (sessionNamespaces) Create(string) error           { return errPlaceholder }
func (sessionNamespaces) Open(string) (*os.File, error) { return nil, errPlaceholder }
func (sessionNamespaces) Remove(string) error           { return errPlaceholder }
func (sessionNamespaces) RemoveAll(string) error        { return errPlaceholder }
func (sessionNamespaces) Listen(*os.File, string, string) (net.Listener, error) {
	return nil, errPlaceholder
}

// newSessionBroker makes the broker over the policy file, auditing into auditDir.
func newSessionBroker(policy, auditDir string, core plugin.Core) (sessionnet.Broker, error) {
	return nil, errPlaceholder
}

// stopBroker has the plugin's Close also shut the broker down.
func stopBroker(sessionnet.Broker, *plugin.Contribution) {}
