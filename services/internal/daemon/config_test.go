package daemon

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allox-os/allox/services/internal/tracked"
	"github.com/google/go-cmp/cmp"
)

func TestParseFlags(t *testing.T) {
	root := t.TempDir()
	got, err := ParseFlags([]string{"--root", root, "--listen-host", "0.0.0.0:8093", "--token-file", "/run/allox/rpc-token"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Root: root, Listen: DefaultListen, ListenHost: "0.0.0.0:8093", TokenFile: "/run/allox/rpc-token",
		State: filepath.Join(root, ".allox-state"), Bwrap: "bwrap", CgroupParent: "allox",
		ObserverLibexec: DefaultObserverLibexec, ObserverPins: DefaultObserverPins, RunUID: 2000, RunGID: 2000,
		RunRecords:     tracked.Retention{MaxRuns: 200, MaxAge: 168 * time.Hour, MaxBytes: 256 << 20},
		SessionSockets: DefaultSessionSockets, Client: DefaultClient,
		SessionNetwork: "disabled", SessionNetworkPolicy: DefaultSessionNetworkPolicy}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseFlags mismatch (-want +got):\n%s", diff)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		args      []string
		inMessage string
	}{
		{"no root", nil, "--root is required"},
		{"monitor root inside the store", []string{"--root", root, "--monitor-root", filepath.Join(root, "mon")}, "keep the journals outside every workspace"},
		{"monitor root relative", []string{"--root", root, "--monitor-root", "mon"}, "absolute path"},
		{"monitor export without the monitor", []string{"--root", root, "--monitor-export", "http://c:4318"}, "need --monitor-root"},
		{"monitor export not a URL", []string{"--root", root, "--monitor-root", "/var/lib/allox/monitor", "--monitor-export", "c:4318"}, "name an OTLP/HTTP endpoint"},
		{"missing root", []string{"--root", filepath.Join(root, "nope")}, "create the store"},
		{"root is a file", []string{"--root", file}, "not a directory"},
		{"observer with the eBPF provider", []string{"--root", root, "--observer", "--process-tracker", "--process-tree-provider", "ebpf"}, "never loaded together"},
		{"scope without observer", []string{"--root", root, "--observer-scope", file}, "--observer-scope needs --observer"},
		{"all interfaces", []string{"--root", root, "--listen", "0.0.0.0:8092"}, "use --listen-host 0.0.0.0:8092 with --token-file"},
		{"empty host", []string{"--root", root, "--listen", ":8092"}, "not a loopback address"},
		{"guest nic", []string{"--root", root, "--listen", "10.0.2.15:8092"}, "not a loopback address"},
		{"name, not ip", []string{"--root", root, "--listen", "localhost:8092"}, "use --listen 127.0.0.1:PORT"},
		{"no port", []string{"--root", root, "--listen", "127.0.0.1"}, "missing port"},
		{"host without token file", []string{"--root", root, "--listen-host", "0.0.0.0:8093"}, "--listen-host needs --token-file"},
		{"bad host address", []string{"--root", root, "--listen-host", "8093", "--token-file", file}, "use HOST:PORT"},
		{"positional", []string{"--root", root, "serve"}, `unexpected argument "serve"`},
		{"unknown flag", []string{"--root", root, "--verbose"}, "flag provided but not defined"},
		{"provider without tracker", []string{"--root", root, "--process-tree-provider", "ebpf"}, "needs --process-tracker"},
		{"unknown provider", []string{"--root", root, "--process-tracker", "--process-tree-provider", "ptrace"}, `use "ebpf"`},
		{"runs as root", []string{"--root", root, "--run-uid", "0"}, "a sandboxed run is never root"},
		{"unknown network mode", []string{"--root", root, "--session-network", "open"}, `--session-network "open": use disabled, isolated or proxy`},
		{"unknown allowed mode", []string{"--root", root, "--session-network", "proxy", "--session-network-modes", "proxy,open"}, `--session-network-modes: "open" is not a network mode`},
		{"mode twice", []string{"--root", root, "--session-network", "proxy", "--session-network-modes", "proxy,proxy"}, `"proxy" is listed twice`},
		{"modes without the plugin", []string{"--root", root, "--session-network-modes", "isolated"}, "--session-network-modes needs --session-network isolated or proxy"},
		{"default not allowed", []string{"--root", root, "--session-network", "proxy", "--session-network-modes", "isolated"}, `does not hold the default mode "proxy"`},
		{"relative policy", []string{"--root", root, "--session-network", "proxy", "--session-network-policy", "policy"}, "--session-network-policy \"policy\": name the policy file by its absolute path"},
		{"policy in the store", []string{"--root", root, "--session-network", "isolated", "--session-network-policy", root + "/a/policy"}, "is inside the workspace store"},
		{"runs in group root", []string{"--root", root, "--run-gid", "0"}, "--run-gid 0"},
		{"bad guard port", []string{"--root", root, "--guard-ports", "1024,x"}, `"x" is not a port`},
		{"negative run records keep", []string{"--root", root, "--run-records-keep", "-1"}, "--run-records-keep -1"},
		{"negative run records age", []string{"--root", root, "--run-records-max-age", "-1h"}, "--run-records-max-age -1h0m0s"},
		{"bad run records size", []string{"--root", root, "--run-records-max-bytes", "lots"}, `flag -run-records-max-bytes: "lots" is not a size`},
		{"negative run records size", []string{"--root", root, "--run-records-max-bytes", "-1"}, "is not a size"},
		{"relative session sockets", []string{"--root", root, "--session-sockets", "run/s"}, "--session-sockets run/s: use an absolute path"},
		{"no session sockets", []string{"--root", root, "--session-sockets", ""}, "--session-sockets is required"},
		{"long session sockets", []string{"--root", root, "--session-sockets", "/" + strings.Repeat("d", 80)}, "AF_UNIX paths"},
		{"relative client", []string{"--root", root, "--client", "allox"}, `--client allox: use an absolute path, or --client "" to bind no client`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFlags(tt.args, io.Discard)
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tt.inMessage) {
				t.Errorf("ParseFlags(%q) = %v, want a usage error containing %q", tt.args, err, tt.inMessage)
			}
		})
	}
}

func TestRunRecordsFlags(t *testing.T) {
	got, err := ParseFlags([]string{"--root", t.TempDir(), "--run-records-keep", "0", "--run-records-max-age", "24h", "--run-records-max-bytes", "64MiB"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tracked.Retention{MaxRuns: 0, MaxAge: 24 * time.Hour, MaxBytes: 64 << 20}, got.RunRecords); diff != "" {
		t.Errorf("RunRecords (-want +got):\n%s", diff)
	}
	for v, want := range map[string]int64{"0": 0, "4096": 4096, "1KiB": 1024, "2GiB": 2 << 30} {
		if n, err := parseSize(v); n != want || err != nil {
			t.Errorf("parseSize(%q) = %d, %v; want %d", v, n, err, want)
		}
	}
}

func TestLoopbackAccepted(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8092", "127.0.0.1:0", "127.5.6.7:1", "[::1]:8092"} {
		if err := checkLoopback(addr); err != nil {
			t.Errorf("checkLoopback(%q) = %v, want nil", addr, err)
		}
	}
}
