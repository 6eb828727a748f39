package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/deploy/probe/internal/sshremote"
	"github.com/allox-os/allox/deploy/probe/internal/wire"
)

// sshChannel makes the ssh_remote channel: its endpoint on addr with the host key at hostKey
// (made if missing), admitting certificates of the CA in caFile; every activity goes to emit.
func sshChannel(addr, caFile, hostKey string, log *slog.Logger, emit func(wire.Event)) (*sshremote.Channel, net.Listener, error) {
	if caFile == "" {
		return nil, nil, errors.New("serve: --ssh-listen needs --ssh-user-ca, the Gateway's SSH CA public key (gateway ssh-ca init writes ssh-ca.pub)")
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: --ssh-user-ca: %w", err)
	}
	ca, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: --ssh-user-ca %s: not a public key in authorized_keys form: %w", caFile, err)
	}
	host, err := loadOrMakeHostKey(hostKey)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: --ssh-host-key: %w", err)
	}
	var ch *sshremote.Channel
	ch, err = sshremote.NewChannel(sshremote.Config{HostKey: host, UserCAs: []ssh.PublicKey{ca}, Log: log,
		Activity: func(a sshremote.Activity) {
			if a.End.IsZero() {
				return // reported when it ends, with its times
			}
			res, _ := json.Marshal(a)
			emit(wire.Event{Kind: wire.EventActivity, DevBox: ch.DevBoxOf(a.Agent, a.Session), Session: a.Session,
				Reason: activityLine(a), Result: res})
		}})
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("serve: --ssh-listen %s: %w", addr, err)
	}
	return ch, ln, nil
}

// activityLine is an activity in one line of metadata, for the Gateway's audit.
func activityLine(a sshremote.Activity) string {
	s := fmt.Sprintf("ssh_remote %s", a.Channel)
	if a.Target != "" {
		s += " " + a.Target
	}
	s += fmt.Sprintf(" by %q from %s, %s to %s", a.Who, a.Remote, a.Start.UTC().Format(time.RFC3339), a.End.UTC().Format(time.RFC3339))
	if a.RunID != "" {
		s += ", run " + a.RunID
	}
	if a.Exit != nil {
		s += fmt.Sprintf(", exit %d", *a.Exit)
	}
	if a.Error != "" {
		s += ": " + a.Error
	}
	return s
}

// loadOrMakeHostKey reads an OpenSSH private key, or makes an ed25519 one there (0600).
func loadOrMakeHostKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		block, err := ssh.MarshalPrivateKey(priv, "allox probe ssh_remote host key")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
		return ssh.NewSignerFromKey(priv)
	}
	if err != nil {
		return nil, err
	}
	return ssh.ParsePrivateKey(b)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
