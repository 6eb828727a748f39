// Package netns keeps network namespaces alive under a path of the caller's choosing and runs code
// inside them: one namespace per session, holding only its own loopback, reused by every run of
// the session and by the daemon's listeners that serve it.
//
// A namespace is made by unshare(CLONE_NEWNET) on a locked OS thread and kept by bind-mounting
// that thread's nsfs file on an empty file at the caller's path (the daemon keeps them in its
// state, outside every workspace), so it outlives every process and descriptor in it until Remove
// unmounts it. Only lo exists in it, brought up (127.0.0.1 and, where the kernel has IPv6, ::1);
// nothing adds an interface or a route: it has no veth and no route beyond lo's.
//
// How runs enter it (the reason Do exists): bubblewrap can only make a new network namespace
// (--unshare-net), never join an existing one; a command prefix that would setns(2) runs as the
// unprivileged run uid, which has no CAP_SYS_ADMIN over a namespace owned by the initial user
// namespace and so cannot join it; a privileged helper exec'd in between would add a root process
// to every run's launch. A child is born in its parent thread's network namespace, and Go forks
// (clone3, also with CLONE_INTO_CGROUP) on the calling thread, so the daemon starts the run's
// launcher from inside Do: the launcher, the sandbox and every descendant live in the session's
// namespace, and nothing privileged is added to the run.
//
// Threads: Do and Create switch a locked OS thread of a fresh goroutine and switch it back before
// unlocking it. If switching back fails, the thread is never unlocked: the goroutine ends locked
// and the Go runtime discards the thread instead of handing it, still in the wrong namespace, to
// other goroutines. New goroutines started by fn run on other threads, in the daemon's namespace.
//
// The package is domain code: it does not log.
package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNotNamespace is returned by Open for a path that does not hold a network namespace.
var ErrNotNamespace = errors.New("not a network namespace")

// Create makes a new network namespace holding only lo, up, and keeps it on path: a new empty file
// (0600) on which the namespace is bind-mounted. path's directory must exist. A path that already
// exists is refused (errors.Is(err, fs.ErrExist)): Open an existing namespace, or Remove it first.
// On failure nothing is left behind.
func Create(path string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	f.Close()
	defer func() {
		if err != nil {
			err = errors.Join(err, Remove(path))
		}
	}()
	return onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("network namespace %s: unshare: %w", path, err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("network namespace %s: bind mount: %w", path, err)
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("network namespace %s: lo: %w", path, err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("network namespace %s: lo up: %w", path, err)
		}
		return nil
	})
}

// Open opens the network namespace kept on path (close-on-exec). A file that is no namespace (an
// empty file left by a crash, or anything else) is refused with ErrNotNamespace.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	if err := check(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	return f, nil
}

// check reports whether f is a network namespace's nsfs file.
func check(f *os.File) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("%w: nothing is mounted on it (remove it and Create it again)", ErrNotNamespace)
	}
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("namespace type: %w", err)
	}
	if t != unix.CLONE_NEWNET {
		return fmt.Errorf("%w: another kind of namespace (type %#x) is mounted on it", ErrNotNamespace, t)
	}
	return nil
}

// Remove unmounts the namespace kept on path (lazily: MNT_DETACH, so descriptors still open on it
// stay valid until closed) and removes the file. A missing path, or a file with nothing mounted on
// it, is no error. The namespace itself ends when its last process, socket and descriptor are gone.
func Remove(path string) error {
	for {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not (or no longer) a mount point; every stacked mount is gone
		}
		if err != nil {
			return fmt.Errorf("network namespace %s: unmount: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	return nil
}

// RemoveAll removes every namespace file in dir (Remove), for recovery after a crash; a missing
// dir is no error. dir itself stays. Entries that are directories are refused and left.
func RemoveAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("network namespaces: %w", err)
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() {
			errs = append(errs, fmt.Errorf("network namespaces: %s is a directory, not a namespace file: remove it by hand", p))
			continue
		}
		errs = append(errs, Remove(p))
	}
	return errors.Join(errs...)
}

// Do runs fn on a locked OS thread inside the network namespace ns, then switches the thread back
// and unlocks it. Whatever fn creates on that thread keeps ns: a socket, and a child process
// started by it (with its descendants). fn must not rely on goroutines it starts being in ns.
// Do returns fn's error, or the failure to enter ns (fn did not run) or to leave it (fn ran; the
// thread is then discarded, see the package doc).
func Do(ns *os.File, fn func() error) error {
	if ns == nil {
		return errors.New("network namespace: nil descriptor")
	}
	fd := int(ns.Fd())
	err := onThread(func() error {
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("network namespace %s: enter: %w", ns.Name(), err)
		}
		return fn()
	})
	runtime.KeepAlive(ns)
	return err
}

// Listen is net.Listen inside ns: the listener stays in ns for its whole life.
func Listen(ns *os.File, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(ns, func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil && l != nil {
		l.Close()
		return nil, err
	}
	return l, err
}

// onThread runs fn on a fresh goroutine locked to its OS thread, restoring the thread's network
// namespace afterwards. If it cannot be restored the goroutine ends still locked, so the runtime
// discards the thread (a thread a child was forked from then exits: a child with Pdeathsig is
// signalled, see tracked).
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("network namespace: the thread's own: %w", err)
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("network namespace: restore the thread's own (the thread is discarded): %w", err))
			return // still locked: Go ends the thread with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
