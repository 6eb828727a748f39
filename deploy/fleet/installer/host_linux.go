package installer

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
)

// hostPath is the PATH commands run with on the host.
const hostPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// inHost runs argv with the host's own programs: chrooted into Root (the pod image has no shell;
// the host's sh, sha256sum and awk are the ones install.sh is written for, and inside the chroot
// every path it names is the host's). env is added to a minimal environment.
func (o Options) inHost(ctx context.Context, env []string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append([]string{hostPath, "LC_ALL=C"}, env...)
	cmd.Stdout, cmd.Stderr = o.Log, o.Log
	if root, err := filepath.Abs(o.Root); err != nil {
		return err
	} else if root != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%q in %s: %w", argv, o.Root, err)
	}
	return nil
}

// restartContainerd restarts the host's containerd with the host's systemctl, which reaches the
// host's systemd over /run/systemd/private in the host root.
func (o Options) restartContainerd(ctx context.Context) error {
	if !o.RestartContainerd {
		return nil
	}
	o.logf("restarting containerd")
	if err := o.inHost(ctx, nil, "/bin/sh", "-c", "exec systemctl restart containerd"); err != nil {
		return fmt.Errorf("restart containerd: %w", err)
	}
	return nil
}
