// Package probe holds the fleet's control plane and data plane around the appliance: the Gateway
// (cmd/gateway: specs, scheduling, leases with fencing epochs, audit, in etcd) and the Probe
// (cmd/probe: the host's lease, intents, Worker Sandboxes, session supervision, bounded
// self-heal). This package's tests run both as real processes on a real etcd, with real
// workspace daemons on a real Btrfs store, and attack the lease: partitions, killed replicas,
// restarted Probes.
package probe
