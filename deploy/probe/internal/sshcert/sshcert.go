// Package sshcert is the SSH credential of ssh_remote: an OpenSSH user certificate that the
// Gateway signs after its approval decision, for one session (the principal AGENT+SESSION, also
// the login name), short-lived, with the terminal and the forwards it permits.
package sshcert

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/crypto/ssh"
)

// Grant is what the Gateway's approval decided: who may enter which session, for how long, and
// with which of a terminal and forwards.
type Grant struct {
	Who            string // the certificate's key id: the person and the approval, for the activity
	Agent, Session string
	TTL            time.Duration
	PTY            bool // permit-pty
	PortForwarding bool // permit-port-forwarding (direct-tcpip, direct-streamlocal; an IDE needs it)
	// AgentForwarding is permit-agent-forwarding: the session's runs of this connection may use
	// the client's SSH agent (ssh -A).
	AgentForwarding bool
}

// clockSkew is how far before now a certificate is already valid, for a client whose clock is
// a little behind the Gateway's.
const clockSkew = time.Minute

// Principal is the login name, and the certificate's only principal, for one session.
func Principal(agent, session string) string { return agent + "+" + session }

// MaxLifetime is the longest validity the Probe's endpoint accepts by default.
const MaxLifetime = 12 * time.Hour

// Issue signs an OpenSSH user certificate for key under ca: valid from now (less clockSkew) for
// g.TTL, for the one principal Principal(g.Agent, g.Session). It refuses a TTL beyond maxLifetime
// (the endpoint would refuse the certificate anyway).
func Issue(ca ssh.Signer, key ssh.PublicKey, g Grant, now time.Time, maxLifetime time.Duration) (*ssh.Certificate, error) {
	switch {
	case g.Who == "":
		return nil, fmt.Errorf("grant.who is empty: name the person and the approval")
	case g.Agent == "" || g.Session == "":
		return nil, fmt.Errorf("grant: agent and session are required")
	case g.TTL <= 0 || g.TTL+clockSkew > maxLifetime:
		return nil, fmt.Errorf("grant.ttl %s: use more than 0 and at most %s", g.TTL, maxLifetime-clockSkew)
	}
	var serial [8]byte
	if _, err := rand.Read(serial[:]); err != nil {
		return nil, err
	}
	ext := map[string]string{}
	if g.PTY {
		ext["permit-pty"] = ""
	}
	if g.PortForwarding {
		ext["permit-port-forwarding"] = ""
	}
	if g.AgentForwarding {
		ext["permit-agent-forwarding"] = ""
	}
	cert := &ssh.Certificate{
		Key: key, Serial: binary.BigEndian.Uint64(serial[:]), CertType: ssh.UserCert, KeyId: g.Who,
		ValidPrincipals: []string{Principal(g.Agent, g.Session)},
		ValidAfter:      uint64(now.Add(-clockSkew).Unix()), ValidBefore: uint64(now.Add(g.TTL).Unix()),
		Permissions: ssh.Permissions{Extensions: ext},
	}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		return nil, fmt.Errorf("sign the certificate: %w", err)
	}
	return cert, nil
}
