#!/bin/sh
# mmdebstrap --extract-hook for the Allox userland: runs on the build host once every package is
# unpacked (the extract variant runs no maintainer scripts and no later hooks). $1 is the root directory;
# ALLOX_PACKAGES is a host file that receives the name, version and architecture of every .deb used.
set -eu
root=$1

# The package list, one deb822 paragraph per .deb, before mmdebstrap cleans the apt cache.
for deb in "$root"/var/cache/apt/archives/*.deb; do
	dpkg-deb --field "$deb" Package Version Architecture
	echo
done >"${ALLOX_PACKAGES:?}"

# Busybox applets as symlinks, as mmdebstrap's own busybox hook does (gives /bin/sh when no dash).
if [ -x "$root/usr/bin/busybox" ]; then
	chroot "$root" /bin/busybox --install -s
fi

# What ca-certificates' postinst would do: trust every shipped certificate and write the bundle.
if [ -d "$root/usr/share/ca-certificates" ]; then
	(cd "$root/usr/share/ca-certificates" && find . -name '*.crt' -type f | sed 's|^\./||' | LC_ALL=C sort) >"$root/etc/ca-certificates.conf"
	mkdir -p "$root/etc/ssl/certs"
	while read -r crt; do
		sed -e '$a\' "$root/usr/share/ca-certificates/$crt"
	done <"$root/etc/ca-certificates.conf" >"$root/etc/ssl/certs/ca-certificates.crt"
	chmod 0644 "$root/etc/ca-certificates.conf" "$root/etc/ssl/certs/ca-certificates.crt"
fi

# mmdebstrap copies the build host's resolv.conf and hostname: replace them by what every host agrees
# on. Kata needs /etc/resolv.conf to be an empty regular file.
rm -f "$root/etc/resolv.conf" "$root/etc/hostname"
: >"$root/etc/resolv.conf"
chmod 0644 "$root/etc/resolv.conf"

# No documentation, manual pages or translations; copyright files stay. No glibc gconv modules either
# (8 MB, 30% of the default userland): they only serve iconv to and from legacy character sets, which
# nothing in the image uses; UTF-8, ASCII and Latin-1 are built into glibc.
rm -rf "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/locale" "$root/usr/share/lintian"
rm -rf "$root"/usr/lib/*/gconv
if [ -d "$root/usr/share/doc" ]; then
	find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
	find "$root/usr/share/doc" -mindepth 1 -depth -type d -empty -delete
fi
