// Command mkimage builds the Allox OS appliance from an HCL image spec: the proven guest kernel,
// the Go PID 1, the rootfs disk image and initramfs, and the Kata drop-ins.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/allox-os/allox/mkimage/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Context{Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr}.Execute(ctx)
	stop()
	os.Exit(code)
}
