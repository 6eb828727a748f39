package sshremote

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/allox-os/allox/internal/testenv"
)

// BenchmarkSSH measures the Probe's SSH endpoint (every channel a run in the session's sandbox,
// through the real workspace daemon's process.exec) against OpenSSH's own sshd on this machine, in
// the same run, interleaved: the round trip of an exec of `true` on an open connection (p50 and
// p99 over 100 samples each), and sftp upload throughput of 64 MiB (5 samples each). It ignores
// b.N: run it once.
//
//	go test -run '^$' -bench SSH -benchtime 1x ./deploy/probe/internal/sshremote/
func BenchmarkSSH(b *testing.B) {
	sshd := sshdBinary(b)
	f := newFixture(b)
	probe, err := f.dial("a+s", f.certSigner(b, grant()))
	must(b, err)
	defer probe.Close()
	direct := startSSHD(b, sshd)
	defer direct.Close()

	const execs = 100
	var pe, de []time.Duration
	for range execs {
		pe = append(pe, timeExec(b, probe))
		de = append(de, timeExec(b, direct))
	}
	const size, uploads = 64 << 20, 5
	data := make([]byte, size)
	rand.Read(data)
	upDir, err := os.MkdirTemp("", "sshbench-up")
	must(b, err)
	defer os.RemoveAll(upDir)
	must(b, os.Chmod(upDir, 0o777)) // the bench user writes here
	var pu, du time.Duration
	for i := range uploads {
		pu += timeUpload(b, probe, filepath.Join(f.current, fmt.Sprintf("up-%d", i)), data)
		du += timeUpload(b, direct, filepath.Join(upDir, "up"), data)
	}
	p50, d50 := testenv.Percentile(pe, 50), testenv.Percentile(de, 50)
	p99, d99 := testenv.Percentile(pe, 99), testenv.Percentile(de, 99)
	mib := float64(size*uploads) / (1 << 20)
	b.ReportMetric(ms(p50), "probe-exec-p50-ms")
	b.ReportMetric(ms(d50), "sshd-exec-p50-ms")
	b.ReportMetric(ms(p99), "probe-exec-p99-ms")
	b.ReportMetric(ms(d99), "sshd-exec-p99-ms")
	b.ReportMetric(mib/pu.Seconds(), "probe-sftp-MiB/s")
	b.ReportMetric(mib/du.Seconds(), "sshd-sftp-MiB/s")
	b.Logf("exec round trip: Probe p50 %.1f ms, p99 %.1f ms; sshd p50 %.1f ms, p99 %.1f ms (%.2f× at p50; %d samples each)",
		ms(p50), ms(p99), ms(d50), ms(d99), float64(p50)/float64(d50), execs)
	b.Logf("sftp upload of 64 MiB: Probe %.0f MiB/s, sshd %.0f MiB/s (%.0f %%; %d samples each)",
		mib/pu.Seconds(), mib/du.Seconds(), 100*du.Seconds()/pu.Seconds(), uploads)
}

func timeExec(b *testing.B, c *ssh.Client) time.Duration {
	start := time.Now()
	s, err := c.NewSession()
	must(b, err)
	must(b, s.Run("true"))
	return time.Since(start)
}

func timeUpload(b *testing.B, c *ssh.Client, path string, data []byte) time.Duration {
	start := time.Now()
	sc, err := sftp.NewClient(c, sftp.UseConcurrentWrites(true))
	must(b, err)
	w, err := sc.Create(path)
	must(b, err)
	if _, err := w.ReadFrom(bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	must(b, w.Close())
	sc.Close()
	return time.Since(start)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sshdBinary is Debian's sshd: installed, or unpacked into the cache by ci/deps.sh (which does
// not install it: that would start a server on port 22). Its privilege separation user is made
// if missing, as the package would.
func sshdBinary(b *testing.B) string {
	sshd := "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		sshd = filepath.Join(cmp.Or(os.Getenv("ALLOX_CACHE"), "/var/cache/allox"), "openssh-server/usr/sbin/sshd")
		testenv.Tool(b, sshd, "ci/deps.sh (it unpacks Debian's openssh-server there)")
	}
	if exec.Command("id", "sshd").Run() != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/run/sshd", "--shell", "/usr/sbin/nologin", "sshd").CombinedOutput(); err != nil {
			b.Fatalf("useradd sshd: %v %s", err, out)
		}
	}
	return sshd
}

// benchUser is the login of the bench's sshd: a system user (made once, if missing) whose shell
// is /bin/sh, as the Probe's, and whose home does not exist, as a session's current/ holds no
// shell startup files; root's shell would run its ~/.bashrc on every exec (bash does for sshd).
const benchUser = "allox-sshbench"

// startSSHD runs OpenSSH's sshd on a free loopback port with a host key and an authorized key of
// the test's own, and returns a client connected to it as benchUser.
func startSSHD(b *testing.B, sshd string) *ssh.Client {
	if exec.Command("id", benchUser).Run() != nil {
		// "*": no password, and not locked ("!"), which sshd without PAM refuses keys for too
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", "--password", "*", benchUser).CombinedOutput(); err != nil {
			b.Fatalf("useradd %s: %v %s", benchUser, err, out)
		}
	}
	dir, err := os.MkdirTemp("", "sshbench") // not below b.TempDir(), whose root is 0700
	must(b, err)
	b.Cleanup(func() { os.RemoveAll(dir) })
	must(b, os.Chmod(dir, 0o755))   // sshd reads the authorized keys as the user
	os.MkdirAll("/run/sshd", 0o755) // sshd's privilege separation directory
	hostKey := filepath.Join(dir, "host")
	must(b, exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey).Run())
	client := newSigner(b)
	must(b, os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(client.PublicKey()), 0o644))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cfg := filepath.Join(dir, "sshd_config")
	must(b, os.WriteFile(cfg, []byte("ListenAddress 127.0.0.1:"+port+"\nHostKey "+hostKey+"\nAuthorizedKeysFile "+dir+"/authorized_keys\n"+
		"StrictModes no\nUsePAM no\nPasswordAuthentication no\nSubsystem sftp "+filepath.Join(sshd, "../../lib/openssh/sftp-server")+"\nPidFile none\n"), 0o600))
	cmd := exec.Command(sshd, "-D", "-e", "-f", cfg)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	must(b, cmd.Start())
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var c *ssh.Client
	for range 100 {
		if c, err = ssh.Dial("tcp", "127.0.0.1:"+port, &ssh.ClientConfig{User: benchUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(client)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey()}); err == nil {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	b.Fatalf("sshd on %s: %v\n%s", port, err, logs.String())
	return nil
}
