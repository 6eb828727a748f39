package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// runDaemon replaces this process with kuruwad, the daemons' program, found beside kuruwa or
// on PATH: "kuruwa daemon ARGS" is "kuruwad daemon ARGS".
func runDaemon(_ context.Context, c *Context, inv *invocation) error {
	path, err := daemonProgram()
	if err != nil {
		return err
	}
	args := []string{path, "daemon"}
	for _, k := range []string{"config", "dir"} {
		if v := inv.one(k); v != "" {
			args = append(args, "--"+k, v)
		}
	}
	if inv.has("verbose") {
		args = append(args, "--verbose")
	}
	return syscall.Exec(path, args, os.Environ())
}

func daemonProgram() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "kuruwad")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("kuruwad")
	if err != nil {
		return "", fmt.Errorf("kuruwad (the daemons' program) is neither beside kuruwa nor on PATH: go build ./services/kuruwa/cmd/kuruwad")
	}
	return p, nil
}
