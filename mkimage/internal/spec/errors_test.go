package spec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
)

// validSpec is the spec each case below edits; the line numbers in the cases refer to it.
const validSpec = `name = "test"
kernel {
  source {
    debian_package = "linux-source-6.12"
    version        = "6.12.117-1~deb12u1"
    sha256         = "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f"
  }
  base      = "allnoconfig"
  fragments = ["../kernel/fragments/*.conf"]
}
init {
  hostname = "test"
  workspace_store {
    serial            = "ws"
    mountpoint        = "/ws"
    label             = "ws"
    fallback_size_mib = 256
  }
  network {
    interface = "eth0"
    address   = "10.0.2.15/24"
  }
  fw_cfg "opt/token" {
    path = "/run/token"
    mode = "0600"
  }
}
service "store" {
  command = ["/bin/store"]
}
service "daemon" {
  command = ["/bin/daemon"]
  after   = ["store"]
}
kata {
  boot_mode = "image"
}
`

// render turns diagnostics into comparable lines: "LINE:COL: Summary: Detail", with the checkout's
// absolute path replaced by $ROOT.
func render(t *testing.T, diags hcl.Diagnostics) []string {
	var out []string
	for _, d := range diags {
		pos := "-"
		if d.Subject != nil {
			pos = fmt.Sprintf("%d:%d", d.Subject.Start.Line, d.Subject.Start.Column)
		}
		out = append(out, strings.ReplaceAll(fmt.Sprintf("%s: %s: %s", pos, d.Summary, d.Detail), repoRoot(t), "$ROOT"))
	}
	return out
}

func TestValidSpec(t *testing.T) {
	if _, diags := Parse("test.hcl", []byte(validSpec), "../../../images"); len(diags) > 0 {
		t.Fatalf("the base spec of the error tests must be valid: %v", render(t, diags))
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		edit []string // pairs of old, new applied to validSpec
		want []string
	}{{
		name: "attribute typo",
		edit: []string{"fragments =", "fragmnts  ="},
		want: []string{`9:3: Unsupported argument: An argument named "fragmnts" is not expected here. Did you mean "fragments"?`},
	}, {
		name: "block typo",
		edit: []string{`service "daemon"`, `servce "daemon"`},
		want: []string{`31:1: Unsupported block type: Blocks of type "servce" are not expected here. Did you mean "service"?`},
	}, {
		name: "typo of an attribute that is also set",
		edit: []string{`  base      = "allnoconfig"`, `  base      = "allnoconfig"` + "\n  bse = 1"},
		want: []string{`9:3: Unsupported argument: An argument named "bse" is not expected here. Did you mean "base"? It is already set on line 8; remove one of the two.`},
	}, {
		name: "attribute in the wrong block",
		edit: []string{`  base      = "allnoconfig"`, `  sha256    = "allnoconfig"`},
		want: []string{
			`2:8: Missing required argument: The argument "base" is required, but no definition was found.`,
			`8:3: Unsupported argument: An argument named "sha256" is not expected here. "sha256" belongs in the kernel source block.`,
		},
	}, {
		name: "sha256 one digit short",
		edit: []string{"3961f\"", "3961\""},
		want: []string{`6:22: Invalid sha256: sha256 must be 64 hex digits; got 63. Compute it with: sha256sum FILE.`},
	}, {
		name: "sha256 uppercase",
		edit: []string{"585a4a074597aefa", "585A4A074597AEFA"},
		want: []string{`6:22: Invalid sha256: sha256 must be lowercase hex; write "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f".`},
	}, {
		name: "dependency cycle",
		edit: []string{`command = ["/bin/store"]`, `command = ["/bin/store"]` + "\n  after   = [\"daemon\"]"},
		want: []string{`30:13: Service dependency cycle: services form a dependency cycle: [store daemon store]. Init could never start these services; remove one of the after entries that close the loop.`},
	}, {
		name: "unknown after",
		edit: []string{`after   = ["store"]`, `after   = ["stor"]`},
		want: []string{`33:14: Unknown service in after: service "daemon" waits for "stor", but no service of that name is defined; the others are "store". Did you mean "store"?`},
	}, {
		name: "missing required argument",
		edit: []string{`  hostname = "test"` + "\n", ""},
		want: []string{`11:6: Missing required argument: The argument "hostname" is required, but no definition was found.`},
	}, {
		name: "missing required block",
		edit: []string{"kata {\n  boot_mode = \"image\"\n}\n", "", validSpec[strings.Index(validSpec, "init {"):strings.Index(validSpec, "service \"store\"")], ""},
		want: []string{`1:1: Missing init block: Exactly one "init" block is required here; add init { ... }.`},
	}, {
		name: "duplicate service",
		edit: []string{`service "daemon"`, `service "store"`, `after   = ["store"]`, ""},
		want: []string{`31:9: Duplicate service: service "store" is already defined at test.hcl:28,1-16; rename one of them or merge the two blocks.`},
	}, {
		name: "several errors are all reported, in source order",
		edit: []string{
			`name = "test"`, `name = "Test Image"`,
			`"image"`, `"imag"`,
			`"/ws"`, `"ws"`,
			`"10.0.2.15/24"`, `"10.0.2.15"`,
			`"0600"`, `"0800"`,
			`"../kernel/fragments/*.conf"`, `"../kernel/fragmnts/*.conf"`,
			`command = ["/bin/store"]`, `command = ["/bin/store"]` + "\n  restart = \"alway\"",
		},
		want: []string{
			`1:8: Invalid image name: image name "Test Image" must be 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; for example "test-image".`,
			`9:16: Fragment glob matches no file: No config fragment file matches "$ROOT/kernel/fragmnts/*.conf" (relative paths resolve against $ROOT/images). Did you mean "$ROOT/kernel/fragments"?`,
			`15:25: Path is not absolute: mountpoint must be an absolute path in the guest; write "/ws".`,
			`21:17: Invalid network address: address must be the interface's address in CIDR notation; add the prefix length, e.g. "10.0.2.15/24".`,
			`25:12: Invalid file mode: mode must be an octal number from "0000" to "7777", such as "0600"; got "0800".`,
			`30:13: Unknown restart policy: restart must be "always", "on-failure" or "never"; got "alway". Did you mean "always"?`,
			`37:15: Unknown boot mode: boot_mode must be "image" or "initrd"; got "imag". Did you mean "image"?`,
		},
	}, {
		name: "mode as a bare number",
		edit: []string{`"0600"`, `0600`},
		want: []string{`25:12: Invalid file mode: mode must be a quoted octal string: HCL reads the bare number 600 as decimal. Write mode = "0600".`},
	}, {
		name: "gateway outside the network",
		edit: []string{`address   = "10.0.2.15/24"`, `address   = "10.0.2.15/24"` + "\n    gateway   = \"10.0.3.1\""},
		want: []string{`22:17: Gateway outside the network: gateway 10.0.3.1 is not in 10.0.2.0/24, so it cannot be reached; pick an address inside it such as 10.0.2.1.`},
	}, {
		name: "rootfs_type differs from the filesystem",
		edit: []string{`boot_mode = "image"`, `rootfs_type = "xfs"`},
		want: []string{`36:17: rootfs_type does not match the root filesystem: kata.rootfs_type is "xfs" but rootfs.filesystem is "ext4"; Kata must mount the filesystem the image has. Set rootfs_type = "ext4".`},
	}, {
		name: "type error suppresses the semantic check of the same attribute",
		edit: []string{`command = ["/bin/store"]`, `command = "/bin/store"`},
		want: []string{`29:13: Unsuitable value type: Unsuitable value: list of string required, but have string`},
	}, {
		name: "unsupported filesystem names the field",
		edit: []string{"kata {", "rootfs {\n  filesystem = \"xfs\"\n}\nkata {"},
		want: []string{`36:16: Unsupported root filesystem: rootfs.filesystem "xfs" is not supported; only "ext4" is. Set filesystem = "ext4" or remove the attribute.`},
	}, {
		name: "duplicate kernel block",
		edit: []string{"init {", "kernel {\n}\ninit {"},
		want: []string{`11:1: Duplicate kernel block: Only one "kernel" block is allowed here; the first one is at test.hcl:2,1-7. Merge the two blocks.`},
	}, {
		name: "debian_package and tarball together",
		edit: []string{`    sha256 `, `    tarball        = "../kernel/allowlist"` + "\n    sha256 "},
		want: []string{`6:22: Conflicting kernel sources: Set debian_package and version, or tarball, not both: remove tarball or debian_package.`},
	}, {
		name: "kata_parity without its allow-list",
		edit: []string{`fragments = ["../kernel/fragments/*.conf"]`, `fragments = ["../kernel/fragments/*.conf"]` + "\n  kata_parity {\n    symbols = \"../kernel/kata/kata-4.1.0-x86_64.conf\"\n  }"},
		want: []string{`10:15: Missing required argument: The argument "allowlist" is required, but no definition was found.`},
	}, {
		name: "kata_parity list not found",
		edit: []string{`fragments = ["../kernel/fragments/*.conf"]`, `fragments = ["../kernel/fragments/*.conf"]` + "\n  kata_parity {\n    symbols   = \"../kernel/kata/kata-4.0.0-x86_64.conf\"\n    allowlist = \"../kernel/kata/parity-allowlist\"\n  }"},
		want: []string{`11:17: File not found: $ROOT/kernel/kata/kata-4.0.0-x86_64.conf does not exist (relative paths resolve against $ROOT/images). Did you mean "$ROOT/kernel/kata/kata-4.1.0-x86_64.conf"?`},
	}, {
		name: "kata_parity empty allow-list path",
		edit: []string{`fragments = ["../kernel/fragments/*.conf"]`, `fragments = ["../kernel/fragments/*.conf"]` + "\n  kata_parity {\n    symbols   = \"../kernel/kata/kata-4.1.0-x86_64.conf\"\n    allowlist = \"\"\n  }"},
		want: []string{`12:17: Empty parity allow-list: allowlist names the file that says, one symbol a line, why we differ from Kata, e.g. "../kernel/kata/parity-allowlist".`},
	}, {
		name: "ready with both tcp and path",
		edit: []string{`command = ["/bin/store"]`, `command = ["/bin/store"]` + "\n  ready {\n    tcp  = \"127.0.0.1:1\"\n    path = \"/run/ok\"\n  }"},
		want: []string{`30:3: Invalid ready block: ready needs exactly one of tcp (host:port) or path (a file that appears); set one.`},
	}, {
		name: "invalid service name",
		edit: []string{`service "store"`, `service "Store DB"`, `["store"]`, `["Store DB"]`},
		want: []string{`28:9: Invalid service name: service name "Store DB" must be 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit; for example "store-db".`},
	}, {
		name: "unknown plugin",
		edit: []string{`command = ["/bin/store"]`, `build   = "./services/store"` + "\n  plugins = [\"process-tree\", \"proces-tree\"]\n  command = [\"/bin/store\"]"},
		want: []string{`30:30: Unknown plugin: plugins may name "dialog", "monitor", "process-tree", "session-network", "session-share" or "system-effects"; got "proces-tree". Did you mean "process-tree"?`},
	}, {
		name: "exclusive plugins",
		edit: []string{`command = ["/bin/store"]`, `build   = "./services/store"` + "\n  plugins = [\"process-tree\", \"system-effects\"]\n  command = [\"/bin/store\"]"},
		want: []string{`30:30: Plugins are exclusive: the system-effects observer and the eBPF process-tree provider both hook process lifecycles and are never loaded together; keep one of "process-tree" and "system-effects".`},
	}, {
		name: "plugins without build",
		edit: []string{`command = ["/bin/store"]`, `plugins = ["process-tree"]` + "\n  command = [\"/bin/store\"]"},
		want: []string{`29:13: Plugins without build: plugins are linked in when mkimage builds the service, and service "store" has no build; add build = "./services/store" or remove plugins.`},
	}, {
		name: "sandbox flag written into command",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\", \"--managed-execution\", \"--run-limits=pids_max=5\"]"},
		want: []string{
			`33:29: Flag belongs in the sandbox block: --managed-execution is rendered from the service's sandbox block; remove it from command and write sandbox { managed_execution = true } instead.`,
			`33:52: Flag belongs in the sandbox block: --run-limits=pids_max=5 is rendered from the service's sandbox block; remove it from command and write sandbox { run_limits { ... } } instead.`,
		},
	}, {
		name: "sandbox limits out of range and above the maximum",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\"]\n  sandbox {\n    session_limits {\n      memory_max = \"8GiB\"\n      cpu_weight = 20000\n    }\n    run_limits {\n      pids_max = 4\n    }\n    max_limits {\n      memory_max = \"4GiB\"\n    }\n  }"},
		want: []string{
			`36:20: Default above the maximum: session_limits.memory_max: 8GiB exceeds the maximum 4GiB in max_limits (test.hcl:43,20-26); lower the default or raise max_limits.memory_max.`,
			`37:20: Limit out of range: session_limits.cpu_weight: 20000 is outside 1..10000 (the kernel's cpu.weight range; 100 is the default).`,
			`40:18: Limit out of range: run_limits.pids_max: 4 is outside 16..4194304: a sandbox needs at least 16 processes.`,
		},
	}, {
		name: "sandbox size and typo",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\"]\n  memory_low = \"64MB\"\n  sandbox {\n    runs_memory_reserv = \"1GiB\"\n    run_limits {\n      memory_max = \"2 gigs\"\n    }\n  }"},
		want: []string{
			`34:16: Invalid size: a size is bytes or a whole number of KiB, MiB, GiB or TiB, e.g. "512MiB", "4GiB" or "1048576"; got "64MB".`,
			`36:5: Unsupported argument: An argument named "runs_memory_reserv" is not expected here. Did you mean "runs_memory_reserve"?`,
			`38:20: Invalid size: a size is bytes or a whole number of KiB, MiB, GiB or TiB, e.g. "512MiB", "4GiB" or "1048576"; got "2 gigs".`,
		},
	}, {
		name: "sandbox quota above the maximum and too small",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\"]\n  sandbox {\n    session_quota = \"8GiB\"\n    max_session_quota = \"4GiB\"\n    store_reserve = \"1KiB\"\n  }"},
		want: []string{
			`35:21: Default above the maximum: session_quota (8GiB) is above max_session_quota (4GiB, test.hcl:36,25-31); lower the default or raise max_session_quota.`,
			`37:21: Quota too small: store_reserve is 1024 bytes; give at least 1MiB (sizes take KiB, MiB, GiB, TiB).`,
		},
	}, {
		name: "session network: unknown modes, default not allowed, relative policy, unknown key",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\"]\n  plugins = [\"session-network\"]\n  sandbox {\n    session_network {\n      default = \"proxy\"\n      modes   = [\"isolatd\", \"disabled\", \"disabled\"]\n      policy  = \"policy.conf\"\n      polcy   = \"x\"\n    }\n  }"},
		want: []string{
			`38:17: Default mode not allowed: modes does not hold the default mode "proxy" (test.hcl:37,17-24); add it to modes or change default.`,
			`38:18: Unknown network mode: modes may name "disabled", "isolated" or "proxy"; got "isolatd". Did you mean "isolated"?`,
			`38:41: Duplicate network mode: mode "disabled" is listed twice; remove one.`,
			`39:17: Policy path not absolute: policy is the egress policy file's path in the image, outside every workspace; use a clean absolute path, e.g. "/etc/allox/session-network/policy"; got "policy.conf".`,
			`40:7: Unsupported argument: An argument named "polcy" is not expected here. Did you mean "policy"? It is already set on line 39; remove one of the two.`,
		},
	}, {
		name: "session network without the plugin, bad default, flag in command",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\", \"--session-network=proxy\"]\n  sandbox {\n    session_network {\n      default = \"isolated\"\n    }\n  }"},
		want: []string{
			`33:29: Flag belongs in the sandbox block: --session-network=proxy is rendered from the service's sandbox block; remove it from command and write sandbox { session_network { default = "proxy" } } instead.`,
			`36:17: Plugin not installed: default = "isolated" needs the session-network plugin in the daemon; add plugins = ["session-network"] to service "daemon", or set default = "disabled".`,
		},
	}, {
		name: "session network: unknown default, missing default",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\"]\n  sandbox {\n    session_network {\n      default = \"proxxy\"\n    }\n  }\n  }\n  service \"other\" {\n  build = \"./services/workspace-daemon\"\n  command = [\"/bin/x\"]\n  sandbox {\n    session_network {\n    }\n  }"},
		want: []string{
			`36:17: Unknown network mode: default may be "disabled", "isolated" or "proxy"; got "proxxy". Did you mean "proxy"?`,
			`44:21: Missing required argument: The argument "default" is required, but no definition was found.`,
		},
	}, {
		name: "share tools without the plugin, flag in command, unknown key",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\", \"--share-tools\"]\n  sandbox {\n    share_tools = true\n    share_tool = true\n  }"},
		want: []string{
			"33:29: Flag belongs in the sandbox block: --share-tools is rendered from the service's sandbox block; remove it from command and write sandbox { share_tools = true } instead.",
			`35:19: Plugin not installed: share_tools = true needs the session-share plugin in the daemon; add plugins = ["session-share"] to service "daemon", or remove share_tools.`,
			`36:5: Unsupported argument: An argument named "share_tool" is not expected here. Did you mean "share_tools"? It is already set on line 35; remove one of the two.`,
		},
	}, {
		name: "dialog without the plugin, flag in command",
		edit: []string{`command = ["/bin/daemon"]`, `build   = "./services/workspace-daemon"` + "\n  command = [\"/bin/daemon\", \"--dialog\"]\n  sandbox {\n    dialog = true\n  }"},
		want: []string{
			"33:29: Flag belongs in the sandbox block: --dialog is rendered from the service's sandbox block; remove it from command and write sandbox { dialog = true } instead.",
			`35:14: Plugin not installed: dialog = true needs the dialog plugin in the daemon; add plugins = ["dialog"] to service "daemon", or remove dialog.`,
		},
	}, {
		name: "sandbox block on another service",
		edit: []string{`command = ["/bin/store"]`, `command = ["/bin/store"]` + "\n  sandbox {\n    managed_execution = true\n  }"},
		want: []string{`30:3: Sandbox block on another service: a sandbox block configures the workspace daemon's runs (build = "./services/workspace-daemon"); service "store" is not built from it: move the block to the daemon's service block.`},
	}, {
		name: "syntax error",
		edit: []string{`name = "test"`, `name "test"`},
		want: []string{`1:12: Invalid block definition: A block definition must have block content delimited by "{" and "}", starting on the same line as the block header.`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := validSpec
			for i := 0; i < len(tt.edit); i += 2 {
				if !strings.Contains(src, tt.edit[i]) {
					t.Fatalf("edit %q does not apply", tt.edit[i])
				}
				src = strings.Replace(src, tt.edit[i], tt.edit[i+1], 1)
			}
			img, diags := Parse("test.hcl", []byte(src), "../../../images")
			if img != nil {
				t.Errorf("Parse returned an image along with errors")
			}
			if diff := cmp.Diff(tt.want, render(t, diags)); diff != "" {
				t.Errorf("diagnostics mismatch (-want +got):\n%s\nsource:\n%s", diff, src)
			}
		})
	}
}
