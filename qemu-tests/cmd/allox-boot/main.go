// Command allox-boot boots a built appliance under QEMU (KVM when it works, TCG otherwise), waits
// until its services are ready, prints the daemon's system.info, and powers it off cleanly — what
// `make boot` runs. With -stay it keeps the guest up (console on stdout) until interrupted.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/allox-os/allox/internal/appliance"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "allox-boot:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("allox-boot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "out", "the mkimage output directory")
	mode := fs.String("mode", "image", "Kata boot mode: image (rootfs.img as /dev/vda) or initrd")
	workspace := fs.String("workspace", "", "raw disk for the workspace store (default OUT/workspace.img, created sparse, 4 GiB)")
	stay := fs.Bool("stay", false, "keep the guest running until interrupted instead of powering it off")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m := appliance.Image
	switch *mode {
	case "image":
	case "initrd":
		m = appliance.Initrd
	default:
		return fmt.Errorf("-mode %q: want image or initrd", *mode)
	}
	info, err := artifact.ReadBootInfo(*out)
	if err != nil {
		return err
	}
	if *workspace == "" {
		*workspace = filepath.Join(*out, "workspace.img")
	}
	if err := appliance.EnsureDisk(*workspace, 4<<30); err != nil {
		return err
	}
	tokenBytes := make([]byte, 24)
	if _, err := rand.Read(tokenBytes); err != nil {
		return err
	}
	token := hex.EncodeToString(tokenBytes)
	r := &runner{w: stdout}
	defer r.cleanup()
	v, err := vm.Start(ctx, r, appliance.Options(*out, info, m, *workspace, token))
	if err != nil {
		return err
	}
	if err := waitReady(ctx, v, info); err != nil {
		v.Kill()
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(info.RPCPort))
	client := rpc.NewClient(url, token, &http.Client{Transport: &http.Transport{Proxy: nil}})
	var sys json.RawMessage
	if err := client.Call(ctx, rpc.ActionSystemInfo, nil, &sys); err != nil {
		v.Kill()
		return fmt.Errorf("system.info: %w", err)
	}
	fmt.Fprintf(stdout, "\nappliance ready after %s (accel %s); system.info:\n%s\n", v.Uptime().Round(time.Millisecond), vm.Accel(), indent(sys))
	if *stay {
		fmt.Fprintf(stdout, "daemon: %s (Authorization: Bearer %s); Ctrl-C powers the guest off\n", url, token)
		<-ctx.Done()
		ctx = context.Background()
	}
	if err := client.Call(ctx, rpc.ActionSystemPowerOff, nil, nil); err != nil {
		var rerr *rpc.Error
		if errors.As(err, &rerr) {
			v.Kill()
			return fmt.Errorf("system.poweroff: %w", err)
		}
	}
	if err := v.Wait(); err != nil {
		return fmt.Errorf("QEMU after power-off: %w", err)
	}
	fmt.Fprintln(stdout, "guest powered off cleanly")
	return nil
}

func waitReady(ctx context.Context, v *vm.VM, info *artifact.BootInfo) error {
	ctx, cancel := context.WithTimeout(ctx, vm.Scaled(90*time.Second))
	defer cancel()
	_, err := appliance.WaitReady(ctx, v, info)
	return err
}

func indent(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.MarshalIndent(v, "  ", "  ")
	return "  " + string(b)
}

// runner is the vm.TB of a command: console lines go to the terminal, cleanups run at exit.
type runner struct {
	w        io.Writer
	cleanups []func()
	failed   bool
}

func (r *runner) Helper()                           {}
func (r *runner) Name() string                      { return "allox-boot" }
func (r *runner) Cleanup(f func())                  { r.cleanups = append(r.cleanups, f) }
func (r *runner) Logf(format string, args ...any)   { fmt.Fprintf(r.w, format+"\n", args...) }
func (r *runner) Failed() bool                      { return r.failed }
func (r *runner) Errorf(format string, args ...any) { r.failed = true; r.Logf(format, args...) }

func (r *runner) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}
