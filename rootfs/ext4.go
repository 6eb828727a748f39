package rootfs

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/allox-os/allox/initramfs"
)

//go:embed mke2fs.conf
var mke2fsConf []byte

// makeExt4 writes an ext4 filesystem of fsBytes bytes holding entries to fsImage, using work as
// scratch space: stage the tree, mke2fs -d, then one debugfs script for device nodes and metadata.
func makeExt4(ctx context.Context, work, fsImage string, fsBytes int64, entries []initramfs.Entry, opt DiskOptions) error {
	staged := filepath.Join(work, "root")
	if err := stageDir(staged, entries); err != nil {
		return fmt.Errorf("stage tree: %w", err)
	}
	conf := filepath.Join(work, "mke2fs.conf")
	if err := os.WriteFile(conf, mke2fsConf, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(fsImage, nil, 0o644); err != nil {
		return err
	}
	if err := os.Truncate(fsImage, fsBytes); err != nil {
		return err
	}
	epoch := strconv.FormatInt(opt.Mtime.Unix(), 10)
	// e2fsprogs reads E2FSPROGS_FAKE_TIME=0 as "unset" and stamps the superblock with the wall clock,
	// so epoch 0 is written as 1 second past it there (inode times stay exact: debugfs sets them).
	fake := strconv.FormatInt(max(opt.Mtime.Unix(), 1), 10)
	env := append(os.Environ(), "MKE2FS_CONFIG="+conf, "E2FSPROGS_FAKE_TIME="+fake, "SOURCE_DATE_EPOCH="+epoch, "LC_ALL=C")
	// The root is mounted read-only: inodes for the tree and a quarter more, not one per 16 KiB.
	inodes := len(entries) + len(entries)/4 + 256
	mkfs := []string{"-q", "-F", "-t", "ext4", "-T", "allox", "-b", "4096", "-m", "0", "-N", strconv.Itoa(inodes),
		"-L", opt.Label, "-U", opt.UUID,
		"-E", "root_owner=0:0,hash_seed=" + opt.HashSeed + ",lazy_itable_init=0,lazy_journal_init=0,nodiscard",
		"-d", staged, fsImage}
	if err := run(ctx, env, nil, "mke2fs", mkfs...); err != nil {
		if strings.Contains(err.Error(), "Could not allocate") || strings.Contains(err.Error(), "No free space") {
			return fmt.Errorf("%w\nthe tree does not fit in %d MiB: raise SizeMiB, or set it to 0 for automatic", err, fsBytes/mib)
		}
		return err
	}
	script := debugfsScript(entries, opt.Mtime.Unix())
	return run(ctx, env, script, "debugfs", "-w", "-f", "-", fsImage)
}

// stageDir writes the directories, files, symlinks and fifos of entries below dir. Owners, modes and
// times are left to debugfs, so this needs no privileges; device nodes are made by debugfs too.
func stageDir(dir string, entries []initramfs.Entry) error {
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.Path))
		var err error
		switch {
		case e.Path == "/" || e.IsDir():
			err = os.Mkdir(p, 0o755)
		case e.Mode&fs.ModeSymlink != 0:
			err = os.Symlink(e.Link, p)
		case e.Mode&fs.ModeDevice != 0:
			// debugfs mknod
		case e.Mode&fs.ModeNamedPipe != 0:
			err = syscall.Mkfifo(p, 0o644)
		default:
			err = writeFile(p, e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func writeFile(p string, e initramfs.Entry) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	var n int64
	if e.Source == "" {
		var m int
		m, err = f.Write(e.Data)
		n = int64(m)
	} else {
		n, err = copyFile(f, e.Source)
	}
	if err == nil && n != e.Size {
		err = fmt.Errorf("%s: source %s is %d bytes, the tree says %d", e.Path, e.Source, n, e.Size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func copyFile(w io.Writer, src string) (int64, error) {
	f, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}

// debugfsScript creates the device nodes, then sets mode, owner and times of every entry.
func debugfsScript(entries []initramfs.Entry, epoch int64) []byte {
	var b bytes.Buffer
	for _, e := range entries {
		if e.Mode&fs.ModeDevice == 0 {
			continue
		}
		kind := "b"
		if e.Mode&fs.ModeCharDevice != 0 {
			kind = "c"
		}
		// debugfs 1.47.0's mknod takes a name in the current directory: a path would become the name.
		dir, name := path.Split(e.Path)
		fmt.Fprintf(&b, "cd %s\nmknod %s %s %d %d\n", debugfsQuote(dir), debugfsQuote(name), kind, e.Major, e.Minor)
	}
	b.WriteString("cd /\n")
	for _, e := range entries {
		q := debugfsQuote(e.Path)
		fmt.Fprintf(&b, "sif %s mode 0%o\nsif %s uid %d\nsif %s gid %d\n", q, initramfs.UnixMode(e.Mode), q, e.UID, q, e.GID)
		for _, field := range []string{"atime", "mtime", "ctime", "crtime"} {
			fmt.Fprintf(&b, "sif %s %s @%d\n", q, field, epoch)
		}
	}
	return b.Bytes()
}

// debugfsQuote quotes a path for debugfs's command parser: inside double quotes, a quote is doubled.
func debugfsQuote(p string) string {
	return `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
}

// unixMode is the st_mode of an fs.FileMode: type bits, setuid/setgid/sticky and permissions.
// run runs an e2fsprogs tool and fails on a non-zero exit or, since debugfs reports failed commands
// only on stderr, on any stderr line other than its version banner.
func run(ctx context.Context, env []string, stdin []byte, name string, args ...string) error {
	path, err := lookTool(name)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	err = cmd.Run()
	var problems []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, name+" 1.") {
			problems = append(problems, line)
		}
	}
	if err != nil || len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
		}
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args[:min(len(args), 4)], " "), err, strings.Join(problems, "\n"))
	}
	return nil
}

// lookTool finds an e2fsprogs tool in PATH or in /sbin and /usr/sbin, which a non-root PATH may lack.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
