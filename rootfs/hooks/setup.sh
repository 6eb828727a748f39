#!/bin/sh
# mmdebstrap --setup-hook for the Allox userland (extract variant): runs on the build host before any
# package is unpacked. $1 is the root directory being built; ALLOX_ARCH is the Debian architecture.
#
# The extract variant runs no maintainer scripts, so this hook does what base-files, base-passwd and
# usrmerge would have done, and no more: merged-/usr symlinks (Debian 12 and later expect them; mmdebstrap
# extracts with --keep-directory-symlink so /bin/x lands in /usr/bin/x), the account databases (root
# and nobody locked, and allox-run, uid and gid 2000: the unprivileged identity of every sandboxed run,
# the daemon's --run-uid/--run-gid default), and /etc/hosts for localhost.
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
printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'allox-run:x:2000:2000:Allox sandboxed runs:/nonexistent:/usr/sbin/nologin' \
	'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'shadow:x:42:' 'allox-run:x:2000:' 'nogroup:x:65534:' >"$root/etc/group"
printf '%s\n' 'root:*:0:0:99999:7:::' 'allox-run:*:0:0:99999:7:::' 'nobody:*:0:0:99999:7:::' >"$root/etc/shadow"
printf '%s\n' 'root:*::' 'shadow:*::' 'allox-run:!::' 'nogroup:*::' >"$root/etc/gshadow"
printf '%s\n' '127.0.0.1 localhost' '::1 localhost ip6-localhost ip6-loopback' >"$root/etc/hosts"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/hosts"
chown 0:42 "$root/etc/shadow" "$root/etc/gshadow"
chmod 0640 "$root/etc/shadow" "$root/etc/gshadow"
