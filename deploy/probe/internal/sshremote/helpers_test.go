package sshremote

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/deploy/probe/internal/sshcert"
	"github.com/allox-os/allox/internal/btrfstest"
	"github.com/allox-os/allox/internal/daemontest"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/testenv"
)

var (
	builtDaemon = sync.OnceValues(func() (string, error) { return daemontest.Build("") })
	builtClient = sync.OnceValues(daemontest.BuildClient)
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range []func() (string, error){builtDaemon, builtClient} {
		if bin, err := b(); err == nil {
			os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fixture is a real workspace daemon (real Btrfs store, real bubblewrap) with agent a and
// session s, reached on its authenticated host listener as the Probe reaches an appliance, and
// the SSH endpoint in front of it.
type fixture struct {
	host    *rpc.Client // the appliance's host listener
	current string      // session s's current/ on the store
	ca      ssh.Signer  // the Gateway's certificate authority
	addr    string      // the SSH endpoint
	now     time.Time   // the endpoint's clock (tests move it)
	mu      sync.Mutex
	acts    []Activity
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	testenv.Root(t, "to start the workspace daemon", "./deploy/probe/internal/sshremote")
	testenv.Tool(t, "bwrap", "apt-get install bubblewrap")
	bin, err := builtDaemon()
	must(t, err)
	client, err := builtClient()
	must(t, err)
	root := btrfstest.Mount(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "sshremote-test-token-0123456789"
	must(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	_, _, addrs := daemontest.Start(t, bin, 2, "--root", root, "--listen", "127.0.0.1:0", "--listen-host", "127.0.0.1:0",
		"--token-file", tokenFile, "--session-sockets", daemontest.SocketsDir(t), "--client", client)
	f := &fixture{host: rpc.NewClient("http://"+addrs["host"], token, nil), now: time.Now(),
		current: filepath.Join(root, "agents/a/workspace/sessions/s/current")}
	ctx := context.Background()
	must(t, f.host.Call(ctx, "agent.create", map[string]any{"agent_id": "a"}, nil))
	// with the turn policy on, the session has its baseline checkpoint (the rollback tests return to it)
	must(t, f.host.Call(ctx, "session.create", map[string]any{"agent_id": "a", "session_id": "s", "turn_checkpoints": true}, nil))
	f.ca = newSigner(t)
	srv, err := New(Config{
		HostKey: newSigner(t),
		UserCAs: []ssh.PublicKey{f.ca.PublicKey()},
		Appliance: func(agent, session string) (Appliance, error) {
			if agent != "a" || session != "s" {
				return nil, errors.New("no such session on this Probe")
			}
			return f.host, nil
		},
		Activity: func(a Activity) { f.mu.Lock(); f.acts = append(f.acts, a); f.mu.Unlock() },
		Now:      func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
	})
	must(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); ln.Close() })
	f.addr = ln.Addr().String()
	return f
}

func newSigner(t testing.TB) ssh.Signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)
	s, err := ssh.NewSignerFromKey(priv)
	must(t, err)
	return s
}

// grant is what the tests' Gateway approves unless a test says otherwise.
func grant() sshcert.Grant {
	return sshcert.Grant{Who: "alice (approval 17)", Agent: "a", Session: "s", TTL: 10 * time.Minute, PTY: true, PortForwarding: true}
}

// certSigner is a client key with a certificate the fixture's CA signed for g.
func (f *fixture) certSigner(t testing.TB, g sshcert.Grant) ssh.Signer {
	t.Helper()
	key := newSigner(t)
	cert, err := sshcert.Issue(f.ca, key.PublicKey(), g, time.Now(), 12*time.Hour)
	must(t, err)
	s, err := ssh.NewCertSigner(cert, key)
	must(t, err)
	return s
}

func (f *fixture) dial(user string, signer ssh.Signer) (*ssh.Client, error) {
	return ssh.Dial("tcp", f.addr, &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 30 * time.Second})
}

// login is a client connection with a certificate for grant().
func (f *fixture) login(t *testing.T) *ssh.Client {
	t.Helper()
	c, err := f.dial("a+s", f.certSigner(t, grant()))
	must(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) activities() []Activity {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Activity(nil), f.acts...)
}

type syscallStat = syscall.Stat_t
