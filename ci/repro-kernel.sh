#!/usr/bin/env bash
# make repro-kernel: compile the kernel afresh in a scratch cache and compare bzImage, vmlinux and the
# final config with the build of the same key in $ALLOX_CACHE (built there first when absent).
# `mkimage diff` names the first differing offset, and for vmlinux the ELF section holding it.
# It compiles the kernel once (about 13 minutes on 2 cores), twice if $ALLOX_CACHE lacks it.
set -euo pipefail
cd "$(dirname "$0")/.."

mkimage=${MKIMAGE:-bin/mkimage}
cache=$(realpath -m "${ALLOX_CACHE:-/var/cache/allox}")
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/allox-repro-kernel.XXXXXX")
# Removed on success; kept on failure (or with KEEP=1) so the differing artifacts can be inspected.
trap 'status=$?; if [ $status = 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$scratch"; else echo "kept $scratch" >&2; fi' EXIT

start=$(date +%s)
echo "repro-kernel: the reference build, from $cache"
"$mkimage" build -cache "$cache" -out "$scratch/ref" "$@"

# The fresh cache shares only the source tarball and the Debian userland: the kernel is configured,
# proven and compiled from scratch in it.
mkdir -p "$scratch/cache" "$cache/sources"
ln -s "$cache/sources" "$scratch/cache/sources"
for f in "$cache"/debian-*; do [ -e "$f" ] && ln -s "$f" "$scratch/cache/"; done
echo "repro-kernel: the fresh build, in $scratch/cache"
"$mkimage" build -cache "$scratch/cache" -out "$scratch/fresh" "$@"

key() { sed -n 's/.*"kernel_build_key": "\(.*\)".*/\1/p' "$1/manifest.json"; }
if [ "$(key "$scratch/ref")" != "$(key "$scratch/fresh")" ]; then
  echo "repro-kernel: FAILED: the build keys differ: $(key "$scratch/ref") vs $(key "$scratch/fresh")" >&2
  exit 1
fi
differ=0
for f in bzImage vmlinux kernel.config; do
  "$mkimage" diff "$scratch/ref/$f" "$scratch/fresh/$f" || differ=1
done
if [ $differ != 0 ]; then
  echo "repro-kernel: FAILED: kernel $(key "$scratch/ref") is not reproducible" >&2
  exit 1
fi
echo "repro-kernel: kernel $(key "$scratch/ref") rebuilt bit-for-bit identical in $(($(date +%s) - start)) s"
