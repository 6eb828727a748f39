package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Tool is one program of the toolchain and the version it reports.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// notInstalled is the version recorded for an optional tool that is absent.
const notInstalled = "not installed"

// toolArgv asks each tool of the build for its version. The kernel tools (gcc, ld, pahole) are also
// in the kernel build key; mke2fs and debugfs write the disk image, mmdebstrap the userland,
// veritysetup the dm-verity hash tree.
var toolArgv = [][]string{
	{"go", "env", "GOVERSION"},
	{"gcc", "--version"},
	{"ld", "--version"},
	{"pahole", "--version"},
	{"mke2fs", "-V"},
	{"debugfs", "-V"},
	{"mmdebstrap", "--version"},
	{"veritysetup", "--version"},
}

// toolchain records the version of every tool; a tool that is not installed is recorded as such
// (the stage that needs it fails on its own with the fix). A tool whose executable has the stamp
// the last build recorded is not run again.
func (s *state) toolchain(ctx context.Context) ([]Tool, error) {
	return toolchainBy(func(argv []string) (string, error) { return s.toolVersion(ctx, argv) })
}

// toolchainBy records every tool's version as version finds it.
func toolchainBy(version func(argv []string) (string, error)) ([]Tool, error) {
	var tools []Tool
	for _, argv := range toolArgv {
		v, err := version(argv)
		if err != nil {
			return nil, err
		}
		tools = append(tools, Tool{Name: argv[0], Version: v})
	}
	return tools, nil
}

func (s *state) toolVersion(ctx context.Context, argv []string) (string, error) {
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return notInstalled, nil
	}
	st, err := stampOf(bin)
	if err != nil {
		return toolVersion(ctx, argv)
	}
	key := strings.Join(argv, " ")
	if old, ok := s.prev.Tools[key]; ok && old.Stamp.same(st) {
		s.next.Tools[key] = old
		return old.Version, nil
	}
	v, err := toolVersion(ctx, argv)
	if err == nil && v != notInstalled {
		s.next.Tools[key] = toolStamp{Stamp: st, Version: v}
	}
	return v, err
}

// toolVersion runs argv and returns the first line it prints (mke2fs prints to stderr).
func toolVersion(ctx context.Context, argv []string) (string, error) {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return notInstalled, nil
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return "", fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	return strings.TrimSpace(first), nil
}
