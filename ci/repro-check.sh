#!/usr/bin/env bash
# make repro-check: build the default appliance (or the spec given as $1) twice, each into its own
# output directory with its own fresh cache, and compare every artifact with `mkimage diff`, which
# names the first differing cpio entry, ext4 file, ELF section, line or offset, and fails on any.
#
# Only the kernel (and its source tarball) is shared with $ALLOX_CACHE, through symlinks: compiling it
# twice takes half an hour, and `make repro-kernel` checks it on its own. The Debian userland is
# fetched afresh with mmdebstrap in each build.
set -euo pipefail
cd "$(dirname "$0")/.."

mkimage=${MKIMAGE:-bin/mkimage}
cache=$(realpath -m "${ALLOX_CACHE:-/var/cache/allox}")
mkdir -p "$cache/kernel" "$cache/sources"
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/allox-repro-check.XXXXXX")
# Removed on success; kept on failure (or with KEEP=1) so the differing artifacts can be inspected.
trap 'status=$?; if [ $status = 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$scratch"; else echo "kept $scratch" >&2; fi' EXIT

start=$(date +%s)
for n in 1 2; do
  mkdir "$scratch/cache$n"
  ln -s "$cache/kernel" "$scratch/cache$n/kernel"
  ln -s "$cache/sources" "$scratch/cache$n/sources"
  echo "repro-check: build $n into $scratch/out$n (cache $scratch/cache$n)"
  ALLOX_CACHE="$scratch/cache$n" "$mkimage" build -cache "$scratch/cache$n" -out "$scratch/out$n" "$@"
done
if ! "$mkimage" diff "$scratch/out1" "$scratch/out2"; then
  echo "repro-check: FAILED: the two builds differ" >&2
  exit 1
fi
"$mkimage" verify "$scratch/out1"
echo "repro-check: two builds with fresh userland caches are bit-for-bit identical ($(find "$scratch/out1" -type f -not -name '.*' | wc -l) files) in $(($(date +%s) - start)) s"
