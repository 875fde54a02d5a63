#!/bin/bash
# pg-chroot.sh - a chroot of a newer Debian release holding that release's
# default PostgreSQL and its wal2json, from Debian's own binary packages, for
# running the integration tests against PostgreSQL 17/18 on a Debian 12 host.
#
#   deploy/pg-chroot.sh RELEASE DIR [PACKAGE...]
#                                        e.g. trixie /var/tmp/pg-trixie
#                                             sid    /var/tmp/pg-sid redis-server valkey-server
#   PG_CHROOT=DIR PG_MAJOR=<printed major> tests/integration/01_basic.sh
#   REDIS_CHROOT=DIR REDIS_SERVER=valkey-server tests/integration/01_basic.sh
#
# The binaries need the newer release's glibc, so PostgreSQL runs inside the
# chroot (tests/integration/lib.sh does that when PG_CHROOT is set) while the
# relay, psql and redis-server run on the host. Needs root.
#
# debootstrap --variant=minbase from the mirror in the host's apt sources
# (which are never changed), then, inside the chroot, the major version the
# release's "postgresql" metapackage depends on: postgresql-NN and
# postgresql-NN-wal2json. A complete chroot (marker file) is reused. proc is
# mounted if it is not (unmount it with: umount DIR/proc).
#
# PACKAGE...: more of the release's packages to install in the same chroot
# (the CI's Redis stage: redis-server valkey-server), also into a chroot that
# is reused; those already installed are left alone. Their versions are
# printed on stderr. One that is not installable makes the exit status 3.
#
# Output: the versions on stderr; the major version alone on the last line of
# stdout. Exit status: 0 ready, 3 the archive does not provide it (debootstrap
# or the package installation failed, or the release has no postgresql
# metapackage), 1 anything else.
set -euo pipefail

usage() { echo "usage: deploy/pg-chroot.sh RELEASE DIR [PACKAGE...]" >&2; exit 1; }
[ $# -ge 2 ] || usage
RELEASE=$1
R=$2
shift 2
EXTRA=("$@")
MARKER=.outbox-pg-chroot

say() { printf 'pg-chroot: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
unavailable() { say "$RELEASE: $*"; exit 3; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mount)"
case $RELEASE in
*/* | '') usage ;;
esac
case $R in
/*) ;;
*) R=$PWD/$R ;;
esac
[ "$R" != / ] || die "refusing DIR /"

t0=$(date +%s)

if [ ! -f "$R/$MARKER" ]; then
	if ! command -v debootstrap >/dev/null; then
		say "installing debootstrap on the host"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >&2 ||
			{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >&2; } ||
			die "could not install debootstrap"
	fi
	mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
	mirror=${mirror:-$(sed -n 's/^deb \(http[^ ]*\/debian\) .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n 1)}
	[ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"

	# A finished debootstrap leaves a working apt-get; anything less is
	# started over (after making sure nothing is mounted inside).
	if [ ! -x "$R/usr/bin/apt-get" ] || [ ! -f "$R/etc/debian_version" ] || [ -d "$R/debootstrap" ]; then
		if [ -e "$R" ]; then
			! mountpoint -q "$R/proc" 2>/dev/null || umount "$R/proc"
			if grep -q " $R/" /proc/mounts; then
				die "$R has something mounted inside; not removing it"
			fi
			say "removing the incomplete chroot $R"
			rm -rf --one-file-system "$R"
		fi
		mkdir -p "$(dirname "$R")"
		say "debootstrap --variant=minbase $RELEASE $R $mirror"
		debootstrap --variant=minbase "$RELEASE" "$R" "$mirror" >"$R.debootstrap.log" 2>&1 || {
			tail -n 20 "$R.debootstrap.log" >&2
			unavailable "debootstrap failed (log: $R.debootstrap.log)"
		}
		say "debootstrap done in $(($(date +%s) - t0)) s"
	fi
fi

mountpoint -q "$R/proc" || mount -t proc proc "$R/proc" || die "could not mount proc on $R/proc"

if [ ! -f "$R/$MARKER" ]; then
	# No service may start inside the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
	chmod +x "$R/usr/sbin/policy-rc.d"
	if ! chroot "$R" apt-get -q update >"$R.apt.log" 2>&1 || grep -q '^E: ' "$R.apt.log"; then
		# A mirror that serves a frozen copy of the archive can hand out a
		# Release file past its Valid-Until (seen for sid). The signature is
		# still checked; only the date check is relaxed, inside this chroot.
		grep -q 'Release file for .* is expired' "$R.apt.log" || {
			tail -n 20 "$R.apt.log" >&2
			unavailable "apt-get update failed inside the chroot (log: $R.apt.log)"
		}
		say "WARNING: $RELEASE's Release file on the mirror is expired; setting Acquire::Check-Valid-Until=false inside $R"
		echo 'Acquire::Check-Valid-Until "false";' >"$R/etc/apt/apt.conf.d/99outbox-expired-release"
		if ! chroot "$R" apt-get -q update >"$R.apt.log" 2>&1 || grep -q '^E: ' "$R.apt.log"; then
			tail -n 20 "$R.apt.log" >&2
			unavailable "apt-get update failed inside the chroot (log: $R.apt.log)"
		fi
	fi
	# The release's default major: what its "postgresql" metapackage depends on.
	major=$(chroot "$R" apt-cache show --no-all-versions postgresql 2>/dev/null |
		sed -n 's/^Depends:.*\<postgresql-\([0-9][0-9]*\)\>.*/\1/p' | head -n 1)
	[ -n "$major" ] || unavailable "no postgresql metapackage (or no postgresql-NN dependency) in the index"
	say "$RELEASE's default PostgreSQL major is $major; installing postgresql-$major postgresql-$major-wal2json"
	chroot "$R" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		"postgresql-$major" "postgresql-$major-wal2json" >>"$R.apt.log" 2>&1 || {
		tail -n 20 "$R.apt.log" >&2
		unavailable "postgresql-$major + postgresql-$major-wal2json are not installable (log: $R.apt.log)"
	}
	chroot "$R" apt-get -q clean >/dev/null 2>&1 || true
	[ -x "$R/usr/lib/postgresql/$major/bin/postgres" ] || die "no $R/usr/lib/postgresql/$major/bin/postgres after the installation"
	[ -f "$R/usr/lib/postgresql/$major/lib/wal2json.so" ] || die "no wal2json.so for $major after the installation"
	echo "PG_MAJOR=$major" >"$R/$MARKER"
	say "chroot $R ready in $(($(date +%s) - t0)) s"
fi

major=$(sed -n 's/^PG_MAJOR=//p' "$R/$MARKER")
[ -n "$major" ] || die "$R/$MARKER has no PG_MAJOR"
pgver=$(chroot "$R" "/usr/lib/postgresql/$major/bin/postgres" --version) ||
	die "postgres $major does not run inside $R"
w2j=$(chroot "$R" dpkg-query -W -f='${Version}' "postgresql-$major-wal2json")
say "$RELEASE in $R: PostgreSQL ${pgver#postgres (PostgreSQL) } + wal2json $w2j"

if [ ${#EXTRA[@]} -gt 0 ]; then
	missing=()
	for p in "${EXTRA[@]}"; do
		[ "$(chroot "$R" dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		t1=$(date +%s)
		say "installing ${missing[*]} in $R"
		{ chroot "$R" apt-get -q update && chroot "$R" env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -q --no-install-recommends "${missing[@]}"; } >>"$R.apt.log" 2>&1 || {
			tail -n 20 "$R.apt.log" >&2
			unavailable "${missing[*]} not installable (log: $R.apt.log)"
		}
		chroot "$R" apt-get -q clean >/dev/null 2>&1 || true
		say "installed in $(($(date +%s) - t1)) s"
	fi
	for p in "${EXTRA[@]}"; do
		say "$RELEASE in $R: $p $(chroot "$R" dpkg-query -W -f='${Version}' "$p")"
	done
fi
echo "$major"
