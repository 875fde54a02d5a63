#!/bin/bash
# build-hiredis-tls.sh - build hiredis >= 1.0 with TLS (hiredis_ssl) into a
# private prefix, for an outbox-relay build that speaks rediss://.
#
#   deploy/build-hiredis-tls.sh PREFIX
#   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig meson setup build-tls -Dredis_tls=enabled
#
# Debian 12 ships hiredis 0.14.1, which has no TLS. This takes the hiredis
# source package of the next Debian release (trixie: 1.2.0) from Debian's own
# archive with apt-get source (checksums checked against the signed Sources
# index), using a private apt state in PREFIX/.apt so the machine's sources and
# package lists stay as they are, and builds it with make USE_SSL=1. Nothing is
# installed system-wide but the build tools (make, libssl-dev). The binary finds
# the library through the rpath meson sets; copy PREFIX/lib along with it.
set -euo pipefail

PREFIX=${1:?usage: deploy/build-hiredis-tls.sh PREFIX}
SUITE=${HIREDIS_SUITE:-trixie}
mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)
if [ -f "$PREFIX/lib/pkgconfig/hiredis_ssl.pc" ]; then
	echo "build-hiredis-tls: $PREFIX already holds hiredis_ssl $(sed -n 's/^Version: //p' "$PREFIX/lib/pkgconfig/hiredis_ssl.pc")" >&2
	exit 0
fi

need=()
for p in make gcc libssl-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	echo "build-hiredis-tls: installing ${need[*]}" >&2
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" ||
		{ $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"; }
fi

# A private apt state that knows only the source index of $SUITE.
APT=$PREFIX/.apt
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/src"
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1 || true)
mirror=${mirror:-$(sed -n 's/^deb \(http[^ ]*\/debian\) .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n 1 || true)}
[ -n "$mirror" ] || { echo "build-hiredis-tls: no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list" >&2; exit 1; }
cat >"$APT/sources.list" <<EOF
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $SUITE main
EOF
APT_OPTS=(-o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
	-o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "APT::Sandbox::User=root")
apt-get "${APT_OPTS[@]}" -q update >"$APT/update.log" 2>&1 ||
	{ cat "$APT/update.log" >&2; echo "build-hiredis-tls: apt-get update of $SUITE's source index failed" >&2; exit 1; }
(cd "$APT/src" && apt-get "${APT_OPTS[@]}" -q source --download-only hiredis >"$APT/source.log" 2>&1) ||
	{ cat "$APT/source.log" >&2; echo "build-hiredis-tls: apt-get source hiredis ($SUITE) failed" >&2; exit 1; }
orig=$(ls "$APT"/src/hiredis_*.orig.tar.gz | head -n 1)
echo "build-hiredis-tls: building $(basename "$orig") with USE_SSL=1 into $PREFIX" >&2
rm -rf "$APT/build"
mkdir -p "$APT/build"
tar -xzf "$orig" -C "$APT/build" --strip-components=1
# hiredis's Makefile reads LIBRARY_PATH as its own install sub-directory.
env -u LIBRARY_PATH make -C "$APT/build" -j"$(nproc)" USE_SSL=1 PREFIX="$PREFIX" LIBRARY_PATH=lib \
	install >"$APT/make.log" 2>&1 || { tail -n 30 "$APT/make.log" >&2; echo "build-hiredis-tls: make failed" >&2; exit 1; }
[ -f "$PREFIX/lib/pkgconfig/hiredis_ssl.pc" ] || { echo "build-hiredis-tls: no hiredis_ssl.pc after make install" >&2; exit 1; }
echo "build-hiredis-tls: hiredis_ssl $(sed -n 's/^Version: //p' "$PREFIX/lib/pkgconfig/hiredis_ssl.pc") in $PREFIX; use PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig" >&2
