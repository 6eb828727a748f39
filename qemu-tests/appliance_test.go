package qemutests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/appliance"
	"github.com/allox-os/allox/internal/artifact"
	"github.com/allox-os/allox/internal/marker"
	"github.com/allox-os/allox/internal/rpc"
	"github.com/allox-os/allox/internal/vm"
)

// mode is how the appliance boots, as Kata would start it.
type mode = appliance.Mode

const (
	imageMode  = appliance.Image
	initrdMode = appliance.Initrd
)

// built is a built output directory.
type built struct {
	dir  string
	info *artifact.BootInfo
}

// needAppliance reads the artifacts for m, or stops the test saying how to build them.
func needAppliance(tb testing.TB, m mode) *built {
	tb.Helper()
	return needApplianceIn(tb, m, outDir())
}

// needApplianceIn is needAppliance for the artifacts in dir, such as a subdirectory of outDir()
// that `make image` builds from a spec under testdata/.
func needApplianceIn(tb testing.TB, m mode, dir string) *built {
	tb.Helper()
	needQEMU(tb)
	files := []string{artifact.Boot, artifact.Kernel, artifact.Rootfs}
	if m == initrdMode {
		files[2] = artifact.Initramfs
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			unavailable(tb, "artifacts missing in %s (no %s): run `make image` (or `make test`)", dir, f)
		}
	}
	info, err := artifact.ReadBootInfo(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var bad []string
	if info.RPCPort == 0 {
		bad = append(bad, "rpc_port is 0: the tests reach the daemon through it")
	}
	if info.TokenFwCfg == "" || info.StoreSerial == "" {
		bad = append(bad, "token_fw_cfg and store_serial must be set")
	}
	if len(bad) > 0 {
		tb.Fatalf("%s: %s", filepath.Join(dir, artifact.Boot), strings.Join(bad, "; "))
	}
	return &built{dir: dir, info: info}
}

func (a *built) path(name string) string { return filepath.Join(a.dir, name) }

// booted is a running appliance and an RPC client for its token listener.
type booted struct {
	*vm.VM
	app   *built
	url   string // of the token listener, forwarded to 127.0.0.1
	token string
	rpc   *rpc.Client
}

// newRPCClient talks to a daemon forwarded to 127.0.0.1, never through a proxy.
func newRPCClient(url, token string) *rpc.Client {
	return rpc.NewClient(url, token, &http.Client{Transport: &http.Transport{Proxy: nil}})
}

// boot starts the appliance in mode m with workspace (a raw disk, or "" for none) as the store disk.
func (a *built) boot(ctx context.Context, tb testing.TB, m mode, workspace string) *booted {
	tb.Helper()
	return a.bootWith(ctx, tb, m, workspace, nil)
}

// bootWith is boot with edit applied to the QEMU options first (nil: none), e.g. to forward the
// guest to test servers on this machine (vm.Options.GuestFwd).
func (a *built) bootWith(ctx context.Context, tb testing.TB, m mode, workspace string, edit func(*vm.Options)) *booted {
	tb.Helper()
	token := newToken(tb)
	opt := appliance.Options(a.dir, a.info, m, workspace, token)
	if edit != nil {
		edit(&opt)
	}
	v, err := vm.Start(ctx, tb, opt)
	if err != nil {
		tb.Fatalf("boot %s mode: %v", m, err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", v.HostPort(a.info.RPCPort))
	return &booted{VM: v, app: a, url: url, token: token, rpc: newRPCClient(url, token)}
}

// waitReady waits for BootDone and every ready service and returns the latest of those lines.
func (b *booted) waitReady(ctx context.Context, tb testing.TB) vm.Line {
	tb.Helper()
	last, err := b.WaitForLine(ctx, marker.BootDone)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range b.app.info.ReadyServices {
		l, err := b.WaitForLine(ctx, marker.Ready(s))
		if err != nil {
			tb.Fatal(err)
		}
		if l.At > last.At {
			last = l
		}
	}
	return last
}

// powerOff asks the daemon to power the guest off and checks that it did so cleanly.
func (b *booted) powerOff(ctx context.Context, tb testing.TB) {
	tb.Helper()
	err := b.rpc.Call(ctx, rpc.ActionSystemPowerOff, nil, nil)
	var rerr *rpc.Error
	if errors.As(err, &rerr) {
		tb.Fatalf("system.poweroff refused: %v", err)
	}
	if err != nil { // the guest may go down before the answer is out
		tb.Logf("system.poweroff: no answer (%v); waiting for QEMU to exit", err)
	}
	if err := b.Wait(); err != nil {
		tb.Fatalf("QEMU after system.poweroff: %v", err)
	}
	if !b.consoleHas(marker.PowerOff) {
		tb.Errorf("console lacks %s: init did not power off through its shutdown path", marker.PowerOff)
	}
	checkNoKernelTrouble(tb, b.VM)
}

func (b *booted) consoleHas(substr string) bool {
	return slices.ContainsFunc(b.Console(), func(l vm.Line) bool { return strings.Contains(l.Text, substr) })
}

// checkNoKernelTrouble fails on a console line that shows a panic, a BUG or an oops. A service's
// own output (init prefixes it with "[name] ") is not the kernel's: the store, for one, marks the
// invariant failures it quarantines a session for with "BUG:".
func checkNoKernelTrouble(tb testing.TB, v *vm.VM) {
	tb.Helper()
	for _, l := range v.Console() {
		if serviceLine(l.Text) {
			continue
		}
		for _, bad := range []string{"Kernel panic", "BUG:", "Oops"} {
			if strings.Contains(l.Text, bad) {
				tb.Errorf("console at %.3fs shows %q: %s", l.At.Seconds(), bad, l.Text)
			}
		}
	}
}

// serviceLine says whether a console line is a service's output, "[workspace-daemon] ...", rather
// than the kernel's, "[    1.234567] ...".
func serviceLine(text string) bool {
	name, _, ok := strings.Cut(text, "] ")
	if !ok || !strings.HasPrefix(name, "[") || len(name) < 2 {
		return false
	}
	c := name[1]
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// newToken is a fresh bearer token for one boot.
func newToken(tb testing.TB) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// blankDisk creates a sparse 1 GiB raw disk for the workspace store.
func blankDisk(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "workspace.img")
	f, err := os.Create(p)
	if err == nil {
		err = errors.Join(f.Truncate(1<<30), f.Close())
	}
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
