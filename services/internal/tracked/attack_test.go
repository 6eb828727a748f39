package tracked

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The attacks of issue 11 on the host's real bubblewrap, one test each: every test fails if the
// attack works. The guest's attack suite (qemu-tests/sandbox_test.go) runs them again on the
// appliance's kernel, with its cgroup controllers and the daemon's network guard.

// attack runs script in a fresh sandboxed run of session s1 and returns its stdout and stderr.
func (e *env) attack(t *testing.T, script string) (stdout, stderr string) {
	t.Helper()
	st := e.run(t, e.req("s1", "/bin/sh", "-c", script))
	stdout, stderr = e.output(t, st.RunID, "stdout"), e.output(t, st.RunID, "stderr")
	if st.State != StateExited {
		t.Fatalf("run %s: %+v\nstdout:\n%s\nstderr:\n%s", st.RunID, st, stdout, stderr)
	}
	return stdout, stderr
}

// TestAttackCorePattern: a core_pattern pipe handler runs as root in the initial namespaces.
func TestAttackCorePattern(t *testing.T) {
	e := newEnv(t, nil)
	before, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut := e.attack(t, `echo "|$PWD/h.sh" > /proc/sys/kernel/core_pattern && echo WROTE`)
	after, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	if strings.Contains(out, "WROTE") || !bytes.Equal(before, after) {
		t.Fatalf("core_pattern was written from a run: %q -> %q (stderr %q)", before, after, errOut)
	}
}

// TestAttackRunIsRoot: no process of a run is uid 0 or holds a capability in the initial user
// namespace (read from outside, in the host's /proc), none holds one in its own, and the run
// cannot make a user namespace of its own to get some.
func TestAttackRunIsRoot(t *testing.T) {
	e := newEnv(t, nil)
	out, _ := e.attack(t, `id -u; id -g; grep -E '^(Cap(Eff|Prm|Inh|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status
unshare -U true 2>/dev/null && echo NESTED_USERNS; unshare -r true 2>/dev/null && echo NESTED_USERNS; true`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || lines[0] != "2000" || lines[1] != "2000" {
		t.Fatalf("run's uid/gid = %q, want 2000/2000", lines)
	}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch {
		case strings.HasPrefix(k, "Cap") && v != "0000000000000000":
			t.Errorf("%s = %s, want no capability", k, v)
		case k == "NoNewPrivs" && v != "1", k == "Seccomp" && v != "2":
			t.Errorf("%s = %s, want 1 / 2 (filter mode)", k, v)
		}
	}
	if strings.Contains(out, "NESTED_USERNS") {
		t.Errorf("a run made a user namespace of its own:\n%s", out)
	}

	// From outside: every process of a live run, bwrap's included.
	st, err := e.m.Start(t.Context(), e.req("s1", "/bin/sh", "-c", "sleep 30 & sleep 30"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.m.Kill(st.RunID)
	waitProcs(t, st.Cgroup, 4) // bwrap, bwrap's init in the namespaces, sh, sleep
	procs, _ := os.ReadFile(filepath.Join(st.Cgroup, "cgroup.procs"))
	initNS, _ := os.Readlink("/proc/1/ns/user")
	for _, pid := range strings.Fields(string(procs)) {
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			continue // exited meanwhile
		}
		ns, _ := os.Readlink("/proc/" + pid + "/ns/user")
		for _, l := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(l, ":")
			f := strings.Fields(v)
			switch {
			case (k == "Uid" || k == "Gid") && strings.Join(f, " ") != "2000 2000 2000 2000":
				t.Errorf("pid %s: %s %v in the initial namespace, want 2000 everywhere", pid, k, f)
			case k == "CapEff" && ns == initNS && v != "\t0000000000000000":
				t.Errorf("pid %s holds capabilities %s in the initial user namespace", pid, v)
			}
		}
	}
}

// TestAttackRunCreatesFilesAsItsOwnUser: what a run creates in current/ (and its /tmp synced
// there) belongs to the run's identity on the host, the same for checkpoints and the observer.
func TestAttackRunCreatesFilesAsItsOwnUser(t *testing.T) {
	e := newEnv(t, nil)
	e.attack(t, `mkdir -p d && echo x > d/f && echo y > /tmp/t`)
	for _, p := range []string{".", "d", "d/f", TmpSyncDir, TmpSyncDir + "/t"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(e.ws.Current, p), &st); err != nil || st.Uid != DefaultRunID || st.Gid != DefaultRunID {
			t.Errorf("%s: owner %d:%d (%v), want %d:%d", p, st.Uid, st.Gid, err, DefaultRunID, DefaultRunID)
		}
	}
}

// TestAttackReadShadow: root-only files of the guest.
func TestAttackReadShadow(t *testing.T) {
	e := newEnv(t, nil)
	var probe []string
	for _, p := range []string{"/etc/shadow", "/etc/gshadow"} {
		if _, err := os.Stat(p); err == nil {
			probe = append(probe, p)
		}
	}
	if len(probe) == 0 {
		t.Skip("this machine has no /etc/shadow")
	}
	out, _ := e.attack(t, `for f in `+strings.Join(probe, " ")+`; do head -c 1 "$f" >/dev/null 2>&1 && echo "READ $f"; done; true`)
	if strings.Contains(out, "READ") {
		t.Errorf("root-only files readable from a run:\n%s", out)
	}
}

// TestAttackProcAndSys: runc's masked paths show nothing, its read-only paths refuse writes, and
// sysfs, cgroupfs, bpffs, tracefs and debugfs are not there at all.
func TestAttackProcAndSys(t *testing.T) {
	e := newEnv(t, nil)
	var script strings.Builder
	for _, p := range maskedProcFiles {
		if _, err := os.Stat(p); err == nil {
			// procfs files report size 0: read them, and look for the mount over them.
			script.WriteString(`[ "$(head -c 64 ` + p + ` 2>/dev/null | wc -c)" = 0 ] || echo "CONTENT ` + p + `"; grep -q " ` + p + ` " /proc/self/mountinfo || echo "CONTENT unmasked ` + p + `"; `)
		}
	}
	for _, p := range maskedProcDirs {
		if _, err := os.Stat(p); err == nil {
			script.WriteString(`ls -A ` + p + ` | grep -q . && echo "CONTENT ` + p + `"; grep -q " ` + p + ` " /proc/self/mountinfo || echo "CONTENT unmasked ` + p + `"; touch ` + p + `/x 2>/dev/null && echo "WROTE ` + p + `"; `)
		}
	}
	script.WriteString(`echo h > /proc/sysrq-trigger 2>/dev/null && echo "WROTE sysrq"; `)
	script.WriteString(`echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo "WROTE drop_caches"; `)
	script.WriteString(`echo 1 > /proc/sys/net/ipv4/ip_forward 2>/dev/null && echo "WROTE ip_forward"; `)
	script.WriteString(`grep -E ' /proc/(sys|sysrq-trigger|bus|fs|irq) ' /proc/self/mounts | grep -v ' ro[ ,]' | sed 's/^/RW /'; `)
	for _, p := range []string{"/sys", "/sys/fs/cgroup", "/sys/fs/bpf", "/sys/kernel/tracing", "/sys/kernel/debug", "/sys/firmware"} {
		script.WriteString(`test -e ` + p + ` && echo "VISIBLE ` + p + `"; `)
	}
	script.WriteString("true")
	out, _ := e.attack(t, script.String())
	for _, bad := range []string{"CONTENT", "WROTE", "RW ", "VISIBLE"} {
		if strings.Contains(out, bad) {
			t.Errorf("a run got through /proc or /sys (%s):\n%s", bad, out)
		}
	}
}

// TestAttackLauncherCommandLine: bwrap's own command line names host paths (the records dir, the
// store); a run reads /proc/*/cmdline of every process it can see.
func TestAttackLauncherCommandLine(t *testing.T) {
	e := newEnv(t, nil)
	out, _ := e.attack(t, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done`)
	for _, leak := range []string{e.records, e.state, "--bind", "--setenv"} {
		if strings.Contains(out, leak) {
			t.Errorf("a run reads the launcher's command line (%q):\n%s", leak, out)
		}
	}
}
