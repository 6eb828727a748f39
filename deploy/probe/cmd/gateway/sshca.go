package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// The Gateway's SSH certificate authority in its PKI directory: the private key (0600) and its
// public key in authorized_keys form, which Probes take as --ssh-user-ca.
const (
	sshCAFile    = "ssh-ca"
	sshCAPubFile = "ssh-ca.pub"
)

// initSSHCA makes the SSH CA in dir (refusing to replace one) and returns its public key's path.
func initSSHCA(dir string) (string, error) {
	priv := filepath.Join(dir, sshCAFile)
	if _, err := os.Stat(priv); err == nil {
		return "", fmt.Errorf("ca ssh-init: %s exists: the Probes trust it; remove it first to replace it", priv)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	block, err := ssh.MarshalPrivateKey(key, "allox gateway ssh_remote CA")
	if err != nil {
		return "", err
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(priv, pem.EncodeToMemory(block), 0o600); err != nil {
		return "", err
	}
	pub := filepath.Join(dir, sshCAPubFile)
	return pub, os.WriteFile(pub, ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o644)
}

// loadSSHCA reads the SSH CA from the PKI directory; without one the Gateway issues no SSH
// credentials (nil, no error).
func loadSSHCA(dir string) (ssh.Signer, error) {
	b, err := os.ReadFile(filepath.Join(dir, sshCAFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("the SSH CA %s: %w", filepath.Join(dir, sshCAFile), err)
	}
	return s, nil
}
