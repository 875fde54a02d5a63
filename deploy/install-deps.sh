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
# 57_example_node (deploy/examples/node) needs node (18 or later) and npm; the
# example's modules, pg included, are vendored there. Any node and npm on
# PATH will do (NodeSource's nodejs bundles npm, and Debian's npm and node-*
# packages conflict with it); only when one is missing are Debian's nodejs and
# npm installed (about 20 MB to download, most of it npm's node-* modules).
node_missing=
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	node_missing=1
fi
if [ ${#missing[@]} -eq 0 ] && [ -z "$node_missing" ]; then
	exit 0
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null; then
		[ ${#missing[@]} -eq 0 ] || { echo "install-deps: missing ${missing[*]} and not root" >&2; exit 1; }
		echo "install-deps: no node or npm on PATH and not root; 57_example_node will be skipped" >&2
		exit 0
	fi
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
updated=
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}" >&2
	$SUDO apt-get update -q
	updated=1
	$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
	# The packages start their own servers; the demo and tests use private ones.
	if command -v service >/dev/null 2>&1; then
		$SUDO service postgresql stop >/dev/null 2>&1 || true
		$SUDO service redis-server stop >/dev/null 2>&1 || true
		$SUDO service prometheus stop >/dev/null 2>&1 || true
	fi
fi
# Node is only for one example's test: failing to install it fails nothing else.
if [ -n "$node_missing" ]; then
	echo "install-deps: installing nodejs npm" >&2
	if ! { [ -n "$updated" ] || $SUDO apt-get update -q; } ||
		! $SUDO apt-get install -y -q --no-install-recommends nodejs npm; then
		echo "install-deps: could not install nodejs npm (see apt-get above); 57_example_node will be skipped" >&2
	fi
fi
exit 0
