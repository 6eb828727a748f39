package store

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lockState takes an exclusive lock on the state directory: one store per state. While another
// process holds it, it retries for up to wait (a previous daemon may still be exiting: its last
// subvolume deletion keeps it in the kernel until the deletion is done) and then fails naming the
// holder.
func lockState(stateDir string, wait time.Duration) (*os.File, error) {
	p := filepath.Join(stateDir, ".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || !time.Now().Add(delay).Before(deadline) {
			break
		}
		time.Sleep(delay)
	}
	holder := lockHolder(f)
	f.Close()
	waited := ""
	if wait > 0 {
		waited = fmt.Sprintf(" (waited %s)", wait.Round(time.Second))
	}
	return nil, fmt.Errorf("state dir %s is in use by %s%s: stop that process (is another daemon running or still exiting?) and start again: %w",
		stateDir, holder, waited, err)
}

// lockHolder names the processes the kernel lists in /proc/locks as holding a lock on f's inode.
func lockHolder(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "another store"
	}
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return "another store"
	}
	defer locks.Close()
	var who []string
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF"; the device is the superblock's,
		// which differs from st_dev on Btrfs, so only the inode number is compared.
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" {
			continue
		}
		id := strings.Split(fs[5], ":")
		if len(id) != 3 || id[2] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		pid, err := strconv.Atoi(fs[4])
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		name := strings.TrimSpace(string(comm))
		if pid == os.Getpid() {
			name += ", this process"
		}
		who = append(who, fmt.Sprintf("pid %d (%s)", pid, name))
	}
	if len(who) == 0 {
		return "another store"
	}
	return strings.Join(who, ", ")
}
