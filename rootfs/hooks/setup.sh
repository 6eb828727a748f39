#!/bin/sh
# mmdebstrap --setup-hook for the Allox userland (extract variant): runs on the build host before any
# package is unpacked. $1 is the root directory being built; ALLOX_ARCH is the Debian architecture.
#
# The extract variant runs no maintainer scripts, so this hook does what base-files, base-passwd and
# usrmerge would have done, and no more: merged-/usr symlinks (Debian 12 and later expect them; mmdebstrap
# extracts with --keep-directory-symlink so /bin/x lands in /usr/bin/x), and the two account databases.
set -eu
root=$1

case ${ALLOX_ARCH:?} in
amd64) dirs="bin sbin lib lib64" ;;
*) dirs="bin sbin lib" ;;
esac
for d in $dirs; do
	ln -s "usr/$d" "$root/$d"
	mkdir -p "$root/usr/$d"
done

mkdir -p "$root/etc"
printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
