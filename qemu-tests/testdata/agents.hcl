# The appliance of the agent adapter tests (deploy/probe, TestAgent*): images/allox.hcl with the
# three agents' CLIs from the npm registry, each pinned by version and the registry's integrity. Each
# CLI is a native executable in a per-platform package (the main packages' node wrappers only pick
# it), so node is not needed in the guest: codex is a static musl binary, claude and opencode are
# glibc executables (Bun-compiled) that run on Debian's libc6 and need AVX2 (under TCG, QEMU's
# "max" CPU). The dialog plugin is installed and enabled (plugins = ["dialog"], sandbox { dialog = true }):
# Claude Code's PreToolUse hook (`allox dialog hook claude-code`) asks its permission requests through it,
# up to the Gateway by the Probe's dialog relay (TestAgentTaskFromGateway). Keep the rest in step with
# images/allox.hcl: the kernel inputs are the same, so `make image` takes the kernel from the cache.
# Relative paths are resolved against this file's directory (qemu-tests/testdata/).

name    = "allox"
version = "0.1.0"

kernel {
  source {
    # Debian's packaged kernel source, pinned to one version and the sha256 of the tarball it ships.
    debian_package = "linux-source-6.12"
    version        = "6.12.117-1~deb12u1"
    sha256         = "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961f"
  }
  base      = "allnoconfig"
  fragments = ["../../kernel/fragments/*.conf"]
  patches   = "../../kernel/patches/series"
  allowlist = "../../kernel/allowlist"
  cmdline   = ["console=ttyS0", "panic=-1", "quiet"]

  kata_parity {
    symbols   = "../../kernel/kata/kata-4.1.0-x86_64.conf"
    allowlist = "../../kernel/kata/parity-allowlist"
  }
}

init {
  hostname = "allox"

  workspace_store {
    serial            = "allox-ws"
    mountpoint        = "/var/lib/allox/workspaces"
    label             = "allox-ws"
    fallback_size_mib = 512
  }

  network {
    interface = "eth0"
    address   = "10.0.2.15/24"
    gateway   = "10.0.2.2"
  }

  # The host hands the RPC bearer token in through QEMU's fw_cfg; no token, no host listener.
  fw_cfg "opt/allox/rpc-token" {
    path = "/run/allox/rpc-token"
    mode = "0600"
  }
}

rootfs {
  suite      = "bookworm"
  # bash: Claude Code's Bash tool runs commands with bash (or zsh), never sh.
  packages   = ["bash", "busybox", "bubblewrap", "btrfs-progs", "ca-certificates"]
  filesystem = "ext4"

  # `npm view PACKAGE@VERSION dist.integrity` prints each integrity.
  npm "codex" {
    package   = "@openai/codex"
    version   = "0.171.0-linux-x64" # what @openai/codex@0.171.0 installs as @openai/codex-linux-x64
    integrity = "sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw=="
    bin       = { "/usr/bin/codex" = "vendor/x86_64-unknown-linux-musl/bin/codex" }
  }
  npm "claude-code" {
    package   = "@anthropic-ai/claude-code-linux-x64" # of @anthropic-ai/claude-code@2.1.332
    version   = "2.1.332"
    integrity = "sha512-f4JWhzwYutJIHScC7/dYOPX6s28tt7ZADhsOi8zwOHq5fFPEuUeChh2NMfinSg0GrUckYxaeebC4h0DqiKzLcw=="
    bin       = { "/usr/bin/claude" = "claude" }
  }
  npm "opencode" {
    package   = "opencode-linux-x64" # of opencode-ai@1.18.33
    version   = "1.18.33"
    integrity = "sha512-q/t/3p2CTxOT9y2kvjesb/LZab2+1eqlhhWA02Be6mjTtmYtNBcBsrI5yDo4Fw7ZSPBW2oyMIGMNRqiKQjiAWw=="
    bin       = { "/usr/bin/opencode" = "bin/opencode" }
  }
}

service "workspace-daemon" {
  build   = "./services/workspace-daemon"
  command = [
    "/usr/bin/allox-workspace-daemon",
    "--root", "/var/lib/allox/workspaces",
    "--listen", "127.0.0.1:8092",
    "--listen-host", "0.0.0.0:8093",
    "--token-file", "/run/allox/rpc-token",
  ]
  plugins = ["dialog"]
  restart = "always"
  # The control plane outlives the runs: -997 as Kata gives its agent, and memory.low for its cgroup.
  oom_score_adj = -997
  memory_low    = "64MiB"
  ready {
    tcp = "127.0.0.1:8092"
  }
  # The runs' resource limits. A session's bound all its runs together; a run's are capped by its
  # session's; session.create may override the session's within max_limits. All runs together leave
  # runs_memory_reserve of the guest's memory to init, this daemon and the kata-agent. The store's
  # space (Btrfs simple quotas): every session and agent has a quota, session.create may ask for up
  # to max_session_quota, and all agents together leave store_reserve free for the daemon's state.
  sandbox {
    dialog              = true
    runs_memory_reserve = "192MiB"
    session_quota       = "8GiB"
    agent_quota         = "32GiB"
    max_session_quota   = "64GiB"
    store_reserve       = "128MiB"
    session_limits {
      pids_max        = 4096
      memory_max      = "4GiB"
      memory_swap_max = "0"
      cpu_weight      = 100
    }
    run_limits {
      pids_max        = 1024
      memory_max      = "2GiB"
      memory_swap_max = "0"
      cpu_weight      = 100
    }
    max_limits {
      pids_max        = 16384
      memory_max      = "16GiB"
      memory_swap_max = "4GiB"
      cpu_weight      = 10000
    }
  }
}

kata {
  boot_mode     = "image"
  rootfs_type   = "ext4"
  kernel_params = ["cgroup_no_v1=all", "systemd.unified_cgroup_hierarchy=1"]
  # Kata's default NVDIMM attachment (/dev/pmem0p1 with dax): the image gets the 2 MiB DAX header
  # and a size that is a multiple of 128 MiB; it still boots as virtio-blk (/dev/vda1).
  nvdimm        = true
  # How Kata attaches container block devices; pinned in the drop-ins, and kata-check holds the
  # kernel to it (virtio-scsi, Kata's x86_64 default, needs 80-kata-block.conf).
  block_device_driver = "virtio-scsi"
}

output {
  dir = "../../out/agents"
}
