package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/deploy/probe/internal/audit"
	"github.com/allox-os/allox/deploy/probe/internal/sshcert"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// defaultSSHTTL is an ssh_remote credential's validity when the request names none.
const defaultSSHTTL = 15 * time.Minute

// SSHCert is the approval decision on an SSH credential and, when it passes, the credential: a
// user certificate for the session's principal, signed with the Gateway's SSH CA, short-lived.
// Policy: a credential opens a session's sandbox to a person, so it needs an approval reference,
// which the audit records with who, the session, the validity and the key's fingerprint (never
// the key or the certificate).
func (g *Gateway) SSHCert(ctx context.Context, actor string, req wire.SSHCertRequest, traceID string) (wire.SSHCert, error) {
	var out wire.SSHCert
	if g.cfg.SSHCA == nil {
		return out, fmt.Errorf("%w: this Gateway has no SSH certificate authority: make one with `gateway ca ssh-init --dir PKI` and restart it", ErrConflict)
	}
	st, err := g.Get(ctx, req.DevBox)
	if err != nil {
		return out, err
	}
	if !hasSession(st.Spec, req.Session) {
		return out, fmt.Errorf("%w: session %q is not a session of devbox %q; name one of its spec's sessions", ErrInvalid, req.Session, req.DevBox)
	}
	if req.Approval == "" {
		return out, fmt.Errorf("%w: approval: an SSH credential opens the session's sandbox to a person; pass the approval reference (--approval)", ErrDenied)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(req.PublicKey))
	if err != nil {
		return out, fmt.Errorf("%w: public_key: not a public key in authorized_keys form (the .pub file ssh-keygen writes): %v", ErrInvalid, err)
	}
	if _, isCert := key.(*ssh.Certificate); isCert {
		return out, fmt.Errorf("%w: public_key: give the key itself, not a certificate", ErrInvalid)
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	if ttl == 0 {
		ttl = defaultSSHTTL
	}
	now := time.Now()
	cert, err := sshcert.Issue(g.cfg.SSHCA, key, sshcert.Grant{Who: req.Who, Agent: st.Spec.Agent, Session: req.Session, TTL: ttl,
		PTY: req.PTY, PortForwarding: req.PortForwarding, AgentForwarding: req.AgentForwarding}, now, sshcert.MaxLifetime)
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	rec := audit.Record{Actor: actor, Action: "ssh_cert", Object: "session/" + req.DevBox + "/" + req.Session, Approval: req.Approval, TraceID: traceID,
		Reason: strings.TrimSpace(fmt.Sprintf("%s; for %q, %s, key %s, serial %d", req.Reason, req.Who, ttl, ssh.FingerprintSHA256(key), cert.Serial))}
	if _, err := g.commit(ctx, nil, auditOp(rec)); err != nil {
		return out, err
	}
	out.Certificate = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert)))
	out.Login = sshcert.Principal(st.Spec.Agent, req.Session)
	out.ValidBefore = time.Unix(int64(cert.ValidBefore), 0).UTC()
	return out, nil
}
