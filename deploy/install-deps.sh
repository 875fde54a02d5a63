#!/bin/bash
# install-deps.sh - install what outbox-relay needs to build, run the demo
# and run its tests on Debian 12, from Debian's own archive. Installs only
# the packages that are missing; needs root (or sudo) when something is.
#
#   deploy/install-deps.sh          build + runtime + test dependencies
set -euo pipefail

PACKAGES=(
	# build
	meson ninja-build pkg-config gcc
	libpq-dev libhiredis-dev libyajl-dev libmicrohttpd-dev
	# servers the demo and the tests start (throwaway, in temp dirs)
	postgresql-15 postgresql-15-wal2json postgresql-client-15
	redis-server redis-tools redis-sentinel
	# tests: sanitizers, fuzzing, and the small tools the scripts use
	clang libclang-rt-14-dev clang-format python3 python3-redis python3-psycopg2 procps util-linux curl openssl
	# 57_example_node (deploy/examples/node): Node.js 18, npm (installs the
	# example's vendored ioredis offline) and pg; with their node-* modules
	# about 21 MB to download, most of it npm's
	nodejs npm node-pg
	# promtool, for 73_alerts (deploy/prometheus/alerts.yml); the package is
	# about 19 MB to download (96 MB installed), the server in it stays stopped
	prometheus
)

missing=()
for p in "${PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || { echo "install-deps: missing ${missing[*]} and not root" >&2; exit 1; }
	SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
# The packages start their own servers; the demo and tests use private ones.
if command -v service >/dev/null 2>&1; then
	$SUDO service postgresql stop >/dev/null 2>&1 || true
	$SUDO service redis-server stop >/dev/null 2>&1 || true
	$SUDO service prometheus stop >/dev/null 2>&1 || true
fi
