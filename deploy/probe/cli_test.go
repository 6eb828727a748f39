package probe

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/testenv"
)

// gateway ca init and issue mint certificates that openssl reads as the role (OU) and identity
// (CN) the Gateway authorises by; bad roles and missing names are refused.
func TestGatewayCA(t *testing.T) {
	openssl := testenv.Tool(t, "openssl", "apt-get install openssl")
	dir := t.TempDir()
	gw := bins(t)["gateway"]
	for _, args := range [][]string{
		{"ca", "init", "--dir", dir},
		{"ca", "issue", "--dir", dir, "--name", "host-a", "--role", "probe"},
		{"ca", "issue", "--dir", dir, "--name", "server", "--role", "gateway", "--host", "127.0.0.1,gw.example"},
	} {
		if out, err := exec.Command(gw, args...).CombinedOutput(); err != nil {
			t.Fatalf("gateway %v: %v\n%s", args, err, out)
		}
	}
	out, err := exec.Command(openssl, "verify", "-CAfile", filepath.Join(dir, "ca.pem"), filepath.Join(dir, "host-a.pem")).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl verify: %v\n%s", err, out)
	}
	subj, _ := exec.Command(openssl, "x509", "-noout", "-subject", "-nameopt", "compat", "-in", filepath.Join(dir, "host-a.pem")).Output()
	if s := string(subj); !strings.Contains(s, "/OU=probe/CN=host-a") {
		t.Errorf("subject %q, want OU=probe and CN=host-a", s)
	}
	san, _ := exec.Command(openssl, "x509", "-noout", "-ext", "subjectAltName", "-in", filepath.Join(dir, "server.pem")).Output()
	if s := string(san); !strings.Contains(s, "IP Address:127.0.0.1") || !strings.Contains(s, "DNS:gw.example") {
		t.Errorf("server SAN %q, want 127.0.0.1 and gw.example", s)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ca", "issue", "--dir", dir, "--name", "x", "--role", "root"}, `--role "root": use probe, admin or gateway`},
		{[]string{"ca", "issue", "--dir", dir, "--role", "probe"}, "--name is required"},
		{[]string{"ca", "issue", "--dir", dir, "--name", "s", "--role", "gateway"}, "needs --host"},
		{[]string{"ca", "issue", "--dir", t.TempDir(), "--name", "x", "--role", "probe"}, "gateway ca init --dir"},
	} {
		out, err := exec.Command(gw, tc.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("gateway %v = %v, %s; want a refusal containing %q", tc.args, err, out, tc.want)
		}
	}
}
