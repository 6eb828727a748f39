#!/usr/bin/env bash
# Installs what building, booting and testing the appliance needs on Debian 12, idempotently:
# Debian packages through apt (only the missing ones), Go modules through the module proxy.
set -euo pipefail

packages=(
  # kernel build
  gcc make bc bison flex libelf-dev libssl-dev dwarves xz-utils patch
  # rootfs: Debian userland, ext4 image, reference checkers; dm-verity hash tree (veritysetup)
  mmdebstrap e2fsprogs fdisk cpio btrfs-progs bubblewrap cryptsetup-bin
  # boot
  qemu-system-x86
  # BPF C for the process-tree provider (make generate)
  clang llvm libbpf-dev
  # bench baseline (busybox init) and tools; busybox nc also relays the QEMU tests' guest forwards
  busybox-static curl ca-certificates
  # the session network bench's reference relay
  socat
  # the Probe's SSH endpoint tests: OpenSSH's own ssh, sftp and ssh-keygen as clients (its sshd,
  # the SSH bench's baseline, is unpacked below rather than installed: installing it would start
  # a server on port 22)
  openssh-client
  # the integration tests' in-sandbox clients (session socket, session network and share streams)
  python3
  # install.sh checks the signed attestation with openssl (the installer tests run it)
  openssl
  # Kuruwa: the rendering oracle for its emulator and the baseline of its bench
  tmux
  # the monitor's HTML report rendered in a real headless browser (TestMonitorInARealRun)
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "ci/deps.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# OpenSSH's sshd and sftp-server for the SSH bench's baseline, unpacked from Debian's packages into
# the cache (never installed, so no sshd service starts); the bench runs them from there.
sshd_root="${ALLOX_CACHE:-/var/cache/allox}/openssh-server"
if [ ! -x /usr/sbin/sshd ] && [ ! -x "$sshd_root/usr/sbin/sshd" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download openssh-server openssh-sftp-server 2>/dev/null) || {
    $sudo apt-get update -qq && (cd "$tmp" && apt-get download openssh-server openssh-sftp-server 2>/dev/null); }
  $sudo mkdir -p "$sshd_root.new"
  for deb in "$tmp"/*.deb; do $sudo dpkg-deb -x "$deb" "$sshd_root.new"; done
  $sudo rm -rf "$sshd_root" && $sudo mv "$sshd_root.new" "$sshd_root"
  rm -rf "$tmp"
  echo "ci/deps.sh: unpacked OpenSSH's sshd into $sshd_root (the SSH bench's baseline)"
fi

if ! command -v go >/dev/null; then
  [ -x /usr/local/go/bin/go ] && export PATH=/usr/local/go/bin:$PATH
fi
command -v go >/dev/null || { echo "ci/deps.sh: Go 1.26 is needed (go.mod); install it to /usr/local/go" >&2; exit 1; }
cd "$(dirname "$0")/.."
go mod download
