// Package pki mints the certificates of the Gateway's mutual TLS: a CA, the Gateway's server
// certificate, and client certificates whose organisational unit is the role (probe, admin) and
// whose common name is the identity (the host a Probe speaks for).
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority held in memory.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// File names in a PKI directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// NewCA makes a self-signed CA valid for ten years.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return &CA{Cert: cert, Key: key}, err
}

// Issue mints a certificate for cn with role as its OU. hosts (IPs or DNS names) make it a server
// certificate as well.
func (ca *CA) Issue(cn, role string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn, OrganizationalUnit: []string{role}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Save writes the CA into dir (the key mode 0600).
func (ca *CA) Save(dir string) error {
	kder, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, CAFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

// LoadCA reads the CA that Save wrote into dir.
func LoadCA(dir string) (*CA, error) {
	cert, err := readCert(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("ca: %w (make one with `gateway ca init --dir %s`)", err, dir)
	}
	kb, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	blk, _ := pem.Decode(kb)
	if blk == nil {
		return nil, fmt.Errorf("ca key %s: no PEM block", filepath.Join(dir, CAKeyFile))
	}
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	return &CA{Cert: cert, Key: key}, err
}

// IssueFiles issues a certificate and writes <dir>/<name>.pem and <name>-key.pem.
func (ca *CA) IssueFiles(dir, name, cn, role string, hosts ...string) error {
	c, k, err := ca.Issue(cn, role, hosts...)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), c, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+"-key.pem"), k, 0o600)
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	return x509.ParseCertificate(blk.Bytes)
}

// Pool reads the CA certificate at path into a pool.
func Pool(path string) (*x509.CertPool, error) {
	cert, err := readCert(path)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	p := x509.NewCertPool()
	p.AddCert(cert)
	return p, nil
}

// ServerConfig is the Gateway's TLS: its certificate, and a client certificate from the CA required.
func ServerConfig(caPath, certPath, keyPath string) (*tls.Config, error) {
	pool, cert, err := load(caPath, certPath, keyPath)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}

func load(caPath, certPath, keyPath string) (*x509.CertPool, tls.Certificate, error) {
	pool, err := Pool(caPath)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, cert, fmt.Errorf("--cert/--key: %w", err)
	}
	return pool, cert, nil
}

// ClientConfig is a Probe's or operator's TLS: its certificate, and the Gateway verified by the CA.
func ClientConfig(caPath, certPath, keyPath string) (*tls.Config, error) {
	pool, cert, err := load(caPath, certPath, keyPath)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// Identity is the role and name a verified client certificate grants.
func Identity(state *tls.ConnectionState) (role, name string, err error) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return "", "", errors.New("no verified client certificate")
	}
	c := state.VerifiedChains[0][0]
	if len(c.Subject.OrganizationalUnit) != 1 {
		return "", "", fmt.Errorf("client certificate %q has %d OUs, want exactly one role", c.Subject.CommonName, len(c.Subject.OrganizationalUnit))
	}
	return c.Subject.OrganizationalUnit[0], c.Subject.CommonName, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
