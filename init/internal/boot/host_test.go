package boot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allox-os/allox/internal/manifest"
	"github.com/google/go-cmp/cmp"
)

func TestNetwork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		net     manifest.Network
		noLink  bool
		calls   []string
		wantErr string
	}{
		{"with gateway", manifest.Network{Interface: "eth0", Address: "10.0.2.15/24", Gateway: "10.0.2.2"}, false,
			[]string{"link up eth0", "addr 10.0.2.15/24 eth0", "route default 10.0.2.2 eth0"}, ""},
		{"no gateway", manifest.Network{Interface: "eth1", Address: "fd00::2/64"}, false,
			[]string{"link up eth1", "addr fd00::2/64 eth1"}, ""},
		{"missing interface", manifest.Network{Interface: "eth0", Address: "10.0.2.15/24"}, true, nil,
			"no such network interface: eth0"},
		{"bad address", manifest.Network{Interface: "eth0", Address: "10.0.2.15"}, false, nil,
			`network.address "10.0.2.15": want a CIDR`},
		{"bad gateway", manifest.Network{Interface: "eth0", Address: "10.0.2.15/24", Gateway: "gw"}, false, nil,
			`network.gateway "gw": want an IP address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{noLink: map[string]bool{"eth0": tc.noLink}}
			err := Network{tc.net}.Run(context.Background(), f.sys(t))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.calls, f.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFwCfg(t *testing.T) {
	sys := (&fake{}).sys(t)
	write(t, sys.Root, FwCfgDir+"/opt/allox/rpc-token/raw", "s3cret")
	step := FwCfg{manifest.FwCfg{Name: "opt/allox/rpc-token", Path: "/run/allox/rpc-token", Mode: 0o640}}
	if err := step.Run(context.Background(), sys); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(sys.Root, "/run/allox/rpc-token")
	b, err := os.ReadFile(dst)
	if err != nil || string(b) != "s3cret" {
		t.Fatalf("token = %q, %v", b, err)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Dir(dst)); fi.Mode().Perm() != 0o700 {
		t.Errorf("parent mode = %v, want 0700 (created by the step)", fi.Mode())
	}
	if _, err := os.Stat(dst + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}

	missing := FwCfg{manifest.FwCfg{Name: "opt/allox/absent", Path: "/run/allox/absent"}}
	if err := missing.Run(context.Background(), sys); !errors.Is(err, ErrSkipped) {
		t.Fatalf("missing blob: %v, want ErrSkipped", err)
	}
	if _, err := os.Stat(filepath.Join(sys.Root, "/run/allox/absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written for a missing blob: %v", err)
	}
	if got := missing.String(); got != "fw_cfg opt/allox/absent -> /run/allox/absent (0600)" {
		t.Errorf("String() = %q (mode 0 must default to 0600)", got)
	}
}

func TestReadManifest(t *testing.T) {
	sys := (&fake{}).sys(t)
	var m manifest.Manifest
	step := ReadManifest{Path: manifest.Path, Into: &m}
	if err := step.Run(context.Background(), sys); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing manifest: %v, want ErrNotExist", err)
	}
	write(t, sys.Root, manifest.Path, `{"version":1,"store":{"mountpoint":"/w"},"services":[],"extra":1}`)
	if err := step.Run(context.Background(), sys); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("unknown field: %v, want an error naming it", err)
	}
	write(t, sys.Root, manifest.Path, `{"version":1,"hostname":"h","store":{"mountpoint":"/w"},"services":[]}`)
	if err := step.Run(context.Background(), sys); err != nil {
		t.Fatal(err)
	}
	if m.Hostname != "h" || m.Store.Mountpoint != "/w" {
		t.Errorf("decoded %+v", m)
	}
}

func TestControllersReportsFailures(t *testing.T) {
	sys := (&fake{}).sys(t)
	write(t, sys.Root, "/cg/cgroup.controllers", "cpu memory\n")
	if err := os.MkdirAll(filepath.Join(sys.Root, "/cg/cgroup.subtree_control"), 0o755); err != nil {
		t.Fatal(err) // a directory: every write fails
	}
	err := Controllers{"/cg"}.Run(context.Background(), sys)
	if err == nil || !strings.Contains(err.Error(), "failed [cpu memory]") {
		t.Fatalf("Run = %v, want both controllers named as failed", err)
	}
}
