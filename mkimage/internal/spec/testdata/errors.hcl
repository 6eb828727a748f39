# A spec with one of most kinds of mistake, for the golden test of FormatDiagnostics.
# Every path in it is absolute or absent, so the output does not depend on the checkout.
name    = "Allox Dev"
version = "0.1.0"

kernel {
  source {
    debian_package = "linux-source-6.12"
    sha256         = "585a4a074597aefa2b1a68ada83a3184ba351c127544dea80618bbcceaa3961"
  }
  base     = "allnoconfg"
  fragmnts = []
  cmdline  = ["console=ttyS0 quiet"]
}

init {
  hostname = "allox"

  workspace_store {
    serial            = "allox-ws"
    mountpoint        = "var/lib/allox/workspaces"
    label             = "allox-ws"
    fallback_size_mib = 512
  }

  network {
    interface = "eth0"
    address   = "10.0.2.15"
    gateway   = "10.0.2.2"
  }

  fw_cfg "opt/allox/rpc-token" {
    path = "/run/allox/rpc-token"
    mode = 0600
  }
}

rootfs {
  filesystem = "ext4"
}

service "workspace-daemon" {
  command = ["allox-workspace-daemon"]
  restart = "alway"
  after   = ["agent"]
}

service "agent" {
  command = ["/usr/bin/kata-agent"]
  after   = ["workspace-daemon"]
}

servce "observer" {
  command = ["/usr/bin/observer"]
}

kata {
  boot_mode   = "initramfs"
  rootfs_type = "ext4"
}
