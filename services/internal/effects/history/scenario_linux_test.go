package history

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scenario changes files, forks a background child, tries a sysctl write
// (osrelease is read-only even for root: EACCES), mounts and unmounts a
// tmpfs in a private mount namespace, tries a mount that fails, sets the
// host name and brings up lo in new UTS and network namespaces, moves a
// child into a sub-cgroup that writes a file by a relative path, and exits 7.
const scenario = `set -e
cd "$DIR"
echo hi > "$DIR/a.txt"
mv "$DIR/a.txt" "$DIR/b.txt"
rm "$DIR/b.txt"
mkdir "$DIR/d"
sleep 0.1 &
wait $!
kill -0 $$
echo x 2>/dev/null > /proc/sys/kernel/osrelease || true
mkdir "$DIR/m"
unshare -m sh -c 'mount -t tmpfs tmpfs "$DIR/m" && umount "$DIR/m"'
mount -t allox-no-such-fs none "$DIR/m" 2>/dev/null || true
unshare -un sh -c 'hostname allox-test-name; ip link set lo up'
sh -c 'echo $$ > "$CG/sub/cgroup.procs"; echo x > rel.txt'
exit 7
`

// TestScenario runs the scenario inside the session cgroup and, at the same
// time, outside it: the history holds exactly the inside run's objects,
// return values and process tree, and nothing of the outside run.
func TestScenario(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t, "session", "sub")
	other := newCgroup(t, "other", "sub")
	in, out := t.TempDir(), t.TempDir()
	var buf syncBuffer
	r, err := Start(cg, &buf)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	outside := shell(t, "", scenario, "DIR="+out, "CG="+other)
	inside := shell(t, cg, scenario, "DIR="+in, "CG="+cg)
	errOut, errIn := outside.Wait(), inside.Wait()
	if inside.ProcessState.ExitCode() != 7 || outside.ProcessState.ExitCode() != 7 {
		t.Fatalf("scenario: inside %v (%s), outside %v (%s); want exit 7", errIn, inside.Stdout, errOut, outside.Stdout)
	}
	sum, evs := stopAndRead(t, r, buf.Bytes)

	if diff := cmp.Diff(wantObjects, objects(evs, in, cg)); diff != "" {
		t.Errorf("syscalls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantTree, tree(t, evs, os.Getpid())); diff != "" {
		t.Errorf("process tree (-want +got):\n%s", diff)
	}
	scope := []uint64{cgroupID(t, cg), cgroupID(t, filepath.Join(cg, "sub"))}
	for _, ev := range evs[:len(evs)-1] {
		line := fmt.Sprintf("%+v", ev)
		if !slices.Contains(scope, ev.CgroupID) || strings.Contains(line, out) || ev.TGID == outside.Process.Pid {
			t.Errorf("event from outside the session cgroup: %s", line)
		}
	}
	end := evs[len(evs)-1]
	if end.Kind != KindEnd || end.Incomplete || end.Dropped != 0 || sum.Dropped != 0 {
		t.Errorf("last line %+v, summary dropped %d: want a complete end line", end, sum.Dropped)
	}
	if sum.Events != uint64(len(evs)-1) || sum.Processes != 14 || sum.Forks != 14 || sum.Exits != 14 {
		t.Errorf("summary %+v; want %d events, 14 processes, forks and exits", sum, len(evs)-1)
	}
}

// wantObjects are the scenario's syscalls: mount(8)'s lock directory
// /run/mount, which depends on the host, is left out.
var wantObjects = []string{
	`chdir path=$DIR -> 0`, // resolves rel.txt below
	`kill pid=$ROOT sig=0 -> 0`,
	`mkdir path=$DIR/d mode=511 -> 0`,
	`mkdir path=$DIR/m mode=511 -> 0`,
	`mount source=none target=$DIR/m fstype=allox-no-such-fs flags=0 -> ENODEV`,
	`mount source=none target=/ flags=278528 -> 0`, // unshare(1): MS_REC|MS_PRIVATE
	`mount source=tmpfs target=$DIR/m fstype=tmpfs flags=0 -> 0`,
	`openat dfd=-100 path=$CG/sub/cgroup.procs flags=577 mode=438 -> 0`,
	`openat dfd=-100 path=$DIR/a.txt flags=577 mode=438 -> 0`,
	`openat dfd=-100 path=/dev/null flags=577 mode=438 -> 0`,
	`openat dfd=-100 path=/dev/null flags=577 mode=438 -> 0`,
	`openat dfd=-100 path=/proc/sys/kernel/osrelease flags=577 mode=438 -> EACCES`,
	`openat dfd=-100 path=rel.txt flags=577 mode=438 -> 0`,
	`renameat2 olddfd=-100 oldpath=$DIR/a.txt newdfd=-100 newpath=$DIR/b.txt flags=1 -> 0`,
	// hostname(1), and ip(8)'s two NETLINK_ROUTE sockets (AF_NETLINK,
	// SOCK_RAW|SOCK_CLOEXEC) with SO_SNDBUF, SO_RCVBUF, NETLINK_EXT_ACK and
	// NETLINK_GET_STRICT_CHK, as strace -f shows them on the same host.
	`sethostname name=allox-test-name len=15 -> 0`,
	`setsockopt fd=3 level=1 optname=7 optlen=4 -> 0`,
	`setsockopt fd=3 level=1 optname=8 optlen=4 -> 0`,
	`setsockopt fd=3 level=270 optname=11 optlen=4 -> 0`,
	`setsockopt fd=3 level=270 optname=12 optlen=4 -> 0`,
	`setsockopt fd=4 level=1 optname=7 optlen=4 -> 0`,
	`setsockopt fd=4 level=1 optname=8 optlen=4 -> 0`,
	`setsockopt fd=4 level=270 optname=11 optlen=4 -> 0`,
	`socket family=16 type=524291 protocol=0 -> 0`,
	`socket family=16 type=524291 protocol=0 -> 0`,
	`umount2 target=$DIR/m flags=0 -> 0`,
	`unlinkat dfd=-100 path=$DIR/b.txt flags=0 -> 0`,
	`unshare flags=1140850688 -> 0`, // CLONE_NEWUTS|CLONE_NEWNET
	`unshare flags=131072 -> 0`,     // CLONE_NEWNS
}

// objects renders the syscall events as sorted lines, arguments in
// declaration order, any non-negative return as 0.
func objects(evs []Event, dir, cg string) []string {
	var root int
	var lines []string
	for _, ev := range evs {
		if ev.Kind == KindFork && root == 0 {
			root = ev.TGID
		}
		if ev.Kind != KindSyscall || ev.Strings["path"] == "/run/mount" {
			continue
		}
		s := ev.Syscall
		spec := syscallByName(ev.Syscall)
		for _, a := range spec.args {
			name, str, _ := argName(a)
			switch {
			case name == "":
			case str && ev.Strings[name] != "":
				s += " " + name + "=" + string(ev.Strings[name])
			case !str:
				s += fmt.Sprintf(" %s=%d", name, ev.Args[name])
			}
		}
		ret := "0"
		if ev.Errno != "" {
			ret = ev.Errno
		}
		s = strings.ReplaceAll(s+" -> "+ret, dir, "$DIR")
		s = strings.ReplaceAll(s, fmt.Sprintf("pid=%d", root), "pid=$ROOT")
		s = strings.ReplaceAll(s, cg, "$CG")
		lines = append(lines, s)
	}
	sort.Strings(lines)
	return lines
}

func syscallByName(name string) syscallSpec {
	for _, s := range syscalls {
		if s.name == name {
			return s
		}
	}
	return syscallSpec{}
}

// wantTree is the scenario's process tree: the basenames each process
// executed, its exit status and its children in fork order.
var wantTree = []string{
	"sh exit=7",
	"  mv exit=0",
	"  rm exit=0",
	"  mkdir exit=0",
	"  sleep exit=0",
	"  mkdir exit=0",
	"  unshare,sh exit=0",
	"    mount exit=0",
	"    umount exit=0",
	"  mount exit=32",
	"  unshare,sh exit=0",
	"    hostname exit=0",
	"    ip exit=0",
	"  sh exit=0",
}

// tree renders the process tree rooted at the child of parent, checking
// that every process's parent is identified by pid and start time.
func tree(t *testing.T, evs []Event, parent int) []string {
	type proc struct {
		execs    []string
		exit     string
		children []procKey
	}
	procs := map[procKey]*proc{}
	var root procKey
	for _, ev := range evs {
		k := procKey{ev.TGID, ev.StartTime}
		switch ev.Kind {
		case KindFork:
			procs[k] = &proc{}
			if ev.PPID == parent {
				root = k
				continue
			}
			p, ok := procs[procKey{ev.PPID, ev.ParentStartTime}]
			if !ok {
				t.Errorf("fork of %d: parent %d (start %d) never seen", ev.TGID, ev.PPID, ev.ParentStartTime)
				continue
			}
			p.children = append(p.children, k)
		case KindExec:
			if p := procs[k]; p != nil {
				p.execs = append(p.execs, filepath.Base(string(ev.Filename)))
			}
		case KindExit:
			if p := procs[k]; p != nil && ev.ExitStatus != nil {
				p.exit = fmt.Sprintf("exit=%d", *ev.ExitStatus)
			} else if p != nil {
				p.exit = fmt.Sprintf("signal=%d", ev.Signal)
			}
		}
	}
	var lines []string
	var walk func(k procKey, depth int)
	walk = func(k procKey, depth int) {
		p := procs[k]
		if p == nil {
			return
		}
		lines = append(lines, strings.Repeat("  ", depth)+strings.Join(p.execs, ",")+" "+p.exit)
		for _, c := range p.children {
			walk(c, depth+1)
		}
	}
	walk(root, 0)
	return lines
}
