#!/bin/bash
# bench.sh - throughput and latency benchmark of outbox-relay against
# pg_recvlogical (the physical limit of wal2json decoding). See README.md.
#
#   tests/bench/bench.sh [--quick] [--out DIR] [--rounds N] [--shapes a,b,..]
#                        [--modes noaof,aof,cluster,tls,plugins] [--no-latency] [--wait-idle MIN] [--keep]
#
# Mode plugins: wal2json and pgoutput side by side on the same backlogs,
# pg_recvlogical and the relay with each (Redis without AOF).
# The relay's default is --publish native; modes noaof and aof also run it on
# --publish function (relay_function), mode plugins with pgoutput too
# (relay_pgo_function), and with --no-pgoutput-streaming (relay_pgo_nostream:
# protocol 1, the server sends a large transaction only once it has read it
# back from its spill files), next to the default. Modes noaof and aof also run
# xadd_live after the relay in each round: xadd_gate.c streams a slot of its own
# with the relay's wal2json options and, as each insert arrives, makes ready a
# bare XADD of the entry the relay wrote for it in that round, sent in groups of
# the relay's size in that round (issue 24, item 2, with a drain beside Redis).
#
# Installs nothing. Builds the relay in release mode (build-bench/) unless
# RELAY_BIN is set. Starts its own PostgreSQL 15 + wal2json and redis-server on
# unix sockets (mode cluster: also 127.0.0.1 TCP ports and a 3-master Redis
# Cluster) in a temp dir and stops them on exit, whatever happens.
set -Eeuo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PY=python3
BENCH_PY=$HERE/bench.py
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh" # bench_cpu_cap
CMDLINE="tests/bench/bench.sh $*"

QUICK=0
OUT=
ROUNDS=3
SHAPES=
MODES=noaof,aof
LATENCY=1
WAIT_IDLE=0
KEEP=0
LAT_RATES=${LAT_RATES:-"1000 5000 20000"}

usage() {
	sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
	exit "${1:-2}"
}

while [ $# -gt 0 ]; do
	case "$1" in
	--quick) QUICK=1 ;;
	--out) OUT=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--shapes) SHAPES=$2; shift ;;
	--modes) MODES=$2; shift ;;
	--no-latency) LATENCY=0 ;;
	--wait-idle) WAIT_IDLE=$2; shift ;;
	--keep) KEEP=1 ;;
	-h | --help) usage 0 ;;
	*) echo "bench.sh: unknown argument $1" >&2; usage ;;
	esac
	shift
done

# Shapes: name -> "events rows_per_tx pad_bytes streams" (pad = incompressible
# hex text inside the jsonb payload, so TOAST compression does not shrink it;
# streams = 1: aggregate_type 'bench', stream outbox:bench; 64: aggregate_type
# 'agg' || (i % 64), streams outbox:agg0 .. outbox:agg63).
declare -A SHAPE
if [ "$QUICK" = 1 ]; then
	SHAPE[tx1]="20000 1 64 1"
	SHAPE[tx10]="20000 10 64 1"
	SHAPE[tx1M]="100000 100000 64 1"
	SHAPE[p1k]="20000 1 1000 1"
	SHAPE[p16k]="4000 1 16000 1"
	SHAPE[tx1x64]="20000 1 64 64"
	SHAPE[tx10x64]="20000 10 64 64"
	LAT_SECS=5
else
	SHAPE[tx1]="100000 1 64 1"
	SHAPE[tx10]="100000 10 64 1"
	SHAPE[tx1M]="1000000 1000000 64 1"
	SHAPE[p1k]="100000 1 1000 1"
	SHAPE[p16k]="20000 1 16000 1"
	SHAPE[tx1x64]="100000 1 64 64"
	SHAPE[tx10x64]="100000 10 64 64"
	LAT_SECS=10
fi
ALL_SHAPES="tx1 tx10 tx1M p1k p16k"    # default shapes of modes noaof and aof
CLUSTER_SHAPES="tx1x64 tx10x64"         # default shapes of mode cluster
TLS_SHAPES="tx1 p1k p16k"               # default shapes of mode tls
USER_SHAPES=${SHAPES//,/ }              # --shapes: these shapes in every mode
MODES=${MODES//,/ }
for s in $USER_SHAPES; do
	[ -n "${SHAPE[$s]:-}" ] || { echo "bench.sh: unknown shape $s (known: $ALL_SHAPES $CLUSTER_SHAPES)" >&2; exit 2; }
done
for m in $MODES; do
	case $m in noaof | aof | cluster | tls | plugins) ;; *) echo "bench.sh: unknown mode $m (noaof, aof, cluster, tls, plugins)" >&2; exit 2 ;; esac
done
shapes_for() { # shapes_for MODE
	if [ -n "$USER_SHAPES" ]; then echo "$USER_SHAPES"
	elif [ "$1" = cluster ]; then echo "$CLUSTER_SHAPES"
	elif [ "$1" = tls ]; then echo "$TLS_SHAPES"
	else echo "$ALL_SHAPES"; fi
}
contenders_for() { # contenders_for MODE (BENCH_CONTENDERS, a word list, replaces the mode's)
	if [ -n "${BENCH_CONTENDERS:-}" ]; then echo "$BENCH_CONTENDERS"
	elif [ "$1" = cluster ]; then echo "pg_recvlogical relay relay_tcp relay_cluster"
	elif [ "$1" = tls ]; then echo "pg_recvlogical relay_tcp relay_tls"
	elif [ "$1" = plugins ]; then echo "pg_recvlogical relay pg_recvlogical_pgo relay_pgo relay_pgo_nostream relay_pgo_function"
	else echo "pg_recvlogical relay xadd_live relay_nodedup relay_function"; fi
}
# The plugin of a contender's slot (mode plugins: the *_pgo ones use pgoutput and
# the publication bench_pub, inserts of public.outbox, made before their slots).
plugin_of() { case $1 in *_pgo | *_pgo_*) echo pgoutput ;; *) echo wal2json ;; esac; }
# One slot per contender and round, all created before the backlog is written:
# at most 6 contenders (mode plugins) x 7 rounds = 42 slots (max_replication_slots).
# More rounds give steadier medians: a --quick drain lasts 0.1-0.3 s, and on a
# shared 2-core machine one round in three can be 15 % off.
MAX_SLOTS=48
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 7 ] && [ $((6 * ROUNDS)) -lt $MAX_SLOTS ] ||
	{ echo "bench.sh: --rounds must be 1..7" >&2; exit 2; }

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# requirements (nothing is installed here)
# ---------------------------------------------------------------------------
missing=()
for b in initdb pg_ctl postgres pg_config; do
	[ -x "$PG_BINDIR/$b" ] || missing+=("postgresql-15 ($PG_BINDIR/$b)")
done
for b in psql pg_recvlogical pgbench; do
	[ -x "$PG_BINDIR/$b" ] || missing+=("postgresql-client-15 ($PG_BINDIR/$b)")
done
if [ -x "$PG_BINDIR/pg_config" ] && [ ! -f "$("$PG_BINDIR/pg_config" --pkglibdir)/wal2json.so" ]; then
	missing+=("postgresql-15-wal2json (wal2json.so)")
fi
command -v redis-server >/dev/null || missing+=("redis-server")
command -v redis-cli >/dev/null || missing+=("redis-tools (redis-cli)")
command -v $PY >/dev/null || missing+=("python3")
if [ "$(id -u)" = 0 ]; then
	command -v runuser >/dev/null || missing+=("util-linux (runuser)")
	id postgres >/dev/null 2>&1 || missing+=("a 'postgres' OS user (comes with postgresql-common)")
fi
command -v cc >/dev/null || missing+=("gcc") # xadd_gate.c, and the relay unless RELAY_BIN
pkg-config --exists libpq 2>/dev/null || missing+=("libpq-dev and pkg-config (xadd_gate.c)")
if [ -z "${RELAY_BIN:-}" ]; then
	command -v meson >/dev/null || missing+=("meson")
	command -v ninja >/dev/null || missing+=("ninja-build")
fi
if [ ${#missing[@]} -gt 0 ]; then
	printf '[bench] ERROR: missing requirements (install them, e.g. with apt-get install):\n' >&2
	printf '  - %s\n' "${missing[@]}" >&2
	exit 1
fi
rv=$(redis-server --version | sed -n 's/.*v=\([0-9]*\)\..*/\1/p')
[ "${rv:-0}" -ge 7 ] || die "redis-server 7 or later is needed (Redis functions); found $(redis-server --version)"
# REDIS_CPU_QUOTA=P (1..100): the single redis-server gets at most P % of one
# core (a CPU cgroup of its own: cpu.max under cgroup v2, cpu.cfs_quota_us under
# v1; period 10 ms), so that Redis, not the walsender or the client, is what
# limits the drain, as on a Redis of its own host that several relays share. A
# drain's events/s is then Redis's ceiling for that client, and relay ÷ xadd_live
# in the report is the ceiling through the relay against a bare XADD of the same
# entries (issue 24's case). The cap holds for every contender of the run.
export REDIS_CPU_QUOTA=${REDIS_CPU_QUOTA:-} # bench.py report reads it
case $REDIS_CPU_QUOTA in
'' | [1-9] | [1-9][0-9] | 100) ;;
*) die "REDIS_CPU_QUOTA=$REDIS_CPU_QUOTA: give a percentage of one core, 1..100" ;;
esac

# ---------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------
if [ -z "${RELAY_BIN:-}" ]; then
	B=$ROOT/build-bench
	if [ ! -f "$B/build.ninja" ]; then
		log "meson setup $B (release)"
		meson setup "$B" "$ROOT" -Dbuildtype=release -Dintegration_tests=false >/dev/null ||
			die "meson setup failed"
	fi
	bt=$(meson introspect --buildoptions "$B" | $PY -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="buildtype"))')
	if [ "$bt" != release ]; then
		log "reconfiguring $B from buildtype=$bt to release"
		meson configure "$B" -Dbuildtype=release >/dev/null
	fi
	meson compile -C "$B" >/dev/null || die "meson compile -C $B failed"
	RELAY_BIN=$B/cmd/outbox-relay/outbox-relay
fi
[ -x "$RELAY_BIN" ] || die "relay binary $RELAY_BIN not found"

# ---------------------------------------------------------------------------
# temp dir, servers, cleanup
# ---------------------------------------------------------------------------
is_root() { [ "$(id -u)" = 0 ]; }
as_pg() { if is_root; then runuser -u postgres -- "$@"; else "$@"; fi; }

T=$(mktemp -d /tmp/outbox-bench.XXXXXX)
chmod 755 "$T"
is_root && chown postgres "$T"
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -O2 -Wall -Wextra -o "$T/xadd_gate" "$HERE/xadd_gate.c" $(pkg-config --cflags --libs libpq) ||
	die "cc $HERE/xadd_gate.c failed (it needs libpq-dev)"
# The relay's wal2json options: as pg_recvlogical's -o arguments (W2J_O) and as
# START_REPLICATION's option list (W2J_SQL, for xadd_gate).
W2J_O=() W2J_SQL=
for kv in format-version=2 include-transaction=1 include-xids=1 include-lsn=1 include-timestamp=1 \
	add-tables=public.outbox add-msg-prefixes=outbox; do
	W2J_O+=(-o "$kv")
	W2J_SQL+="${W2J_SQL:+, }\"${kv%%=*}\" '${kv#*=}'"
done
OUT=${OUT:-/tmp/outbox-bench-results.$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PGDATA=$T/pg
RDIR=$T/redis
RSOCK=$RDIR/redis.sock
PGPORT=5433
CDIR=$T/cluster       # mode cluster: one dir per node, $CDIR/PORT
CLUSTER_PORTS=()
CLUSTER_PIDS=()
CLUSTER_URL=
SPORT=                # modes cluster, tls: TCP port of the single node (besides its unix socket)
TPORT=                # mode tls: its TLS port
TLSDIR=$T/tls         # mode tls: throwaway CA and server certificate
REDIS_EXTRA=()        # more redis-server arguments (mode tls)
DSN="host=$T port=$PGPORT user=postgres dbname=postgres"
PSQL=("$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$T" -p "$PGPORT" -U postgres -d postgres)
BG_PIDS=() # background processes we started (relay, consumer)

kill_everything() {
	local p pm
	for p in "${BG_PIDS[@]}"; do
		kill -9 "$p" 2>/dev/null || true
	done
	if [ -f "$RDIR/redis.pid" ]; then
		p=$(cat "$RDIR/redis.pid" 2>/dev/null || true)
		[ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
	fi
	for pm in "$CDIR"/*/redis.pid; do
		[ -f "$pm" ] || continue
		p=$(cat "$pm" 2>/dev/null || true)
		[ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
	done
	if [ -f "$PGDATA/postmaster.pid" ]; then
		pm=$(head -n 1 "$PGDATA/postmaster.pid" 2>/dev/null || true)
		if [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null; then
			kill -QUIT "$pm" 2>/dev/null || true # immediate shutdown
			for _ in $(seq 1 50); do
				kill -0 "$pm" 2>/dev/null || break
				sleep 0.1
			done
			kill -9 "$pm" 2>/dev/null || true
		fi
	fi
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	kill_everything
	[ -n "${WATCHDOG:-}" ] && kill "$WATCHDOG" 2>/dev/null || true
	bench_cpu_cap_done # empty once its redis-servers are gone
	if [ "$KEEP" = 1 ] || { [ "$rc" != 0 ] && [ "$rc" != 130 ] && [ "$rc" != 143 ]; }; then
		log "temp dir kept: $T (delete it when done)"
	else
		rm -rf "$T"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# If this shell is SIGKILLed the EXIT trap never runs: a detached watchdog stops
# the servers once we are gone (PostgreSQL via its postmaster.pid, Redis and the
# cluster nodes via their pidfiles).
(
	trap '' HUP INT
	parent=$$
	while kill -0 "$parent" 2>/dev/null; do sleep 2; done
	[ -f "$RDIR/redis.pid" ] && kill -9 "$(cat "$RDIR/redis.pid")" 2>/dev/null
	for f in "$CDIR"/*/redis.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
	[ -f "$PGDATA/postmaster.pid" ] && kill -QUIT "$(head -n 1 "$PGDATA/postmaster.pid")" 2>/dev/null
	[ -f "$T/bg.pids" ] && while read -r p; do kill -9 "$p" 2>/dev/null; done <"$T/bg.pids"
	true
) </dev/null >/dev/null 2>&1 &
WATCHDOG=$!

psql_q() { "${PSQL[@]}" "$@"; }

pg_start() {
	as_pg "$PG_BINDIR/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
	local extra=""
	local gucs
	gucs=$("$PG_BINDIR/postgres" --describe-config 2>/dev/null | cut -f1 || true)
	if grep -qx output_plugin_libraries <<<"$gucs"; then
		extra="output_plugin_libraries = 'pgoutput,test_decoding,wal2json'"
	fi
	cat >>"$PGDATA/postgresql.conf" <<-EOF
		listen_addresses = ''
		unix_socket_directories = '$T'
		port = $PGPORT
		wal_level = logical
		max_wal_senders = 10
		max_replication_slots = $MAX_SLOTS
		$extra
		fsync = off
		synchronous_commit = on
		full_page_writes = off
		shared_buffers = 1GB
		max_wal_size = 16GB
		min_wal_size = 1GB
		checkpoint_timeout = 1h
		autovacuum = off
		max_connections = 50
	EOF
	as_pg "$PG_BINDIR/pg_ctl" -D "$PGDATA" -l "$T/pg.log" -w -t 30 start >/dev/null ||
		{ tail -n 20 "$T/pg.log" >&2; die "PostgreSQL did not start"; }
	PM_PID=$(head -n 1 "$PGDATA/postmaster.pid")
	psql_q -f "$ROOT/sql/outbox.sql" >/dev/null
}

redis_start() { # redis_start noaof|aof [TCP_PORT]
	local aof=no tcp=(--port 0)
	[ "$1" = aof ] && aof=yes
	[ -n "${2:-}" ] && tcp=(--bind 127.0.0.1 --port "$2")
	mkdir -p "$RDIR"
	redis-server "${tcp[@]}" --unixsocket "$RSOCK" --unixsocketperm 700 --save '' \
		--dir "$RDIR" --appendonly "$aof" --appendfsync everysec \
		--daemonize yes --pidfile "$RDIR/redis.pid" --logfile "$RDIR/redis.log" "${REDIS_EXTRA[@]}" >/dev/null
	for _ in $(seq 1 100); do
		[ "$(redis-cli -s "$RSOCK" PING 2>/dev/null)" = PONG ] && [ -s "$RDIR/redis.pid" ] && break
		sleep 0.05
	done
	[ "$(redis-cli -s "$RSOCK" PING 2>/dev/null)" = PONG ] || die "redis-server did not start"
	REDIS_PID=$(cat "$RDIR/redis.pid")
	[ -z "$REDIS_CPU_QUOTA" ] || bench_cpu_cap "$REDIS_CPU_QUOTA" "$REDIS_PID" ||
		die "REDIS_CPU_QUOTA: could not cap redis-server $REDIS_PID (above)"
}


redis_stop() {
	[ -n "${REDIS_PID:-}" ] || return 0
	redis-cli -s "$RSOCK" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
	for _ in $(seq 1 100); do
		kill -0 "$REDIS_PID" 2>/dev/null || break
		sleep 0.05
	done
	kill -9 "$REDIS_PID" 2>/dev/null || true
	rm -rf "$RDIR"
	REDIS_PID=
}

rcli() { redis-cli -s "$RSOCK" "$@"; }

# ---------------------------------------------------------------------------
# mode tls: a throwaway CA and a server certificate for 127.0.0.1
# ---------------------------------------------------------------------------

tls_setup() {
	"$RELAY_BIN" --version | grep -q 'Redis TLS: yes' ||
		die "mode tls needs a relay built with TLS (hiredis_ssl): deploy/build-hiredis-tls.sh DIR, then build with PKG_CONFIG_PATH=DIR/lib/pkgconfig meson setup ... -Dredis_tls=enabled and pass RELAY_BIN"
	command -v openssl >/dev/null || die "mode tls needs openssl"
	mkdir -p "$TLSDIR"
	local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=outbox-relay bench CA" \
		-keyout "$TLSDIR/ca.key" -out "$TLSDIR/ca.crt" 2>"$TLSDIR/openssl.log" &&
		openssl req -new "${ec[@]}" -subj "/CN=localhost" -keyout "$TLSDIR/server.key" \
			-out "$TLSDIR/server.csr" 2>>"$TLSDIR/openssl.log" &&
		printf '%s\n' "subjectAltName = DNS:localhost,IP:127.0.0.1" "extendedKeyUsage = serverAuth" >"$TLSDIR/server.ext" &&
		openssl x509 -req -in "$TLSDIR/server.csr" -CA "$TLSDIR/ca.crt" -CAkey "$TLSDIR/ca.key" \
			-CAcreateserial -days 2 -extfile "$TLSDIR/server.ext" -out "$TLSDIR/server.crt" 2>>"$TLSDIR/openssl.log" ||
		die "openssl: $(cat "$TLSDIR/openssl.log")"
}

# ---------------------------------------------------------------------------
# mode cluster: a local 3-master Redis Cluster on loopback TCP
# ---------------------------------------------------------------------------
# Ports are random in 11000-22767, so the bus ports (+10000) stay below Linux's
# ephemeral range; a port taken between the check and the bind is retried.
tcp_port_free() {
	"$PY" -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)' "$1"
}

free_port() { # free_port [bus]: a free port (with "bus": port + 10000 free too)
	local p
	for _ in $(seq 1 200); do
		p=$((11000 + RANDOM % 11768))
		tcp_port_free "$p" || continue
		[ "${1:-}" != bus ] || tcp_port_free $((p + 10000)) || continue
		echo "$p"
		return 0
	done
	die "no free TCP port found in 11000-22767"
}

cnode_launch() { # cnode_launch PORT: start a cluster node; 1 if it does not come up
	local p=$1 d=$CDIR/$1
	mkdir -p "$d"
	redis-server --bind 127.0.0.1 --port "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
		--cluster-node-timeout 5000 --save '' --appendonly no --dir "$d" \
		--daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" >/dev/null || return 1
	for _ in $(seq 1 100); do
		[ "$(redis-cli -h 127.0.0.1 -p "$p" PING 2>/dev/null)" = PONG ] && [ -s "$d/redis.pid" ] && return 0
		sleep 0.05
	done
	[ -s "$d/redis.pid" ] && kill -9 "$(cat "$d/redis.pid")" 2>/dev/null
	rm -f "$d/redis.pid"
	return 1
}

cluster_state_ok() {
	local p
	for p in "${CLUSTER_PORTS[@]}"; do
		redis-cli -h 127.0.0.1 -p "$p" CLUSTER INFO 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok' || return 1
	done
}

cluster_start() {
	local p addrs=() i ok
	mkdir -p "$CDIR"
	CLUSTER_PORTS=()
	CLUSTER_PIDS=()
	for i in 1 2 3; do
		ok=0
		for _ in 1 2 3 4 5; do
			p=$(free_port bus)
			if cnode_launch "$p"; then ok=1; break; fi
		done
		[ "$ok" = 1 ] || die "could not start cluster node $i (see $CDIR/*/redis.log)"
		CLUSTER_PORTS+=("$p")
		CLUSTER_PIDS+=("$(cat "$CDIR/$p/redis.pid")")
		addrs+=("127.0.0.1:$p")
	done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$CDIR/create.log" 2>&1 ||
		{ cat "$CDIR/create.log" >&2; die "redis-cli --cluster create failed"; }
	for _ in $(seq 1 300); do
		cluster_state_ok && break
		sleep 0.1
	done
	cluster_state_ok || die "cluster_state is not ok 30 s after creation"
	redis-cli --cluster check "${addrs[0]}" >"$CDIR/check.log" 2>&1 &&
		grep -q 'All 16384 slots covered' "$CDIR/check.log" ||
		{ cat "$CDIR/check.log" >&2; die "redis-cli --cluster check failed"; }
	CLUSTER_URL="redis-cluster://${addrs[0]},${addrs[1]}"
	log "redis cluster: masters on 127.0.0.1 ports ${CLUSTER_PORTS[*]} (pids ${CLUSTER_PIDS[*]}); single node on $RSOCK and 127.0.0.1:$SPORT"
}

cluster_stop() {
	local i p
	for i in "${!CLUSTER_PORTS[@]}"; do
		p=${CLUSTER_PORTS[$i]}
		redis-cli -h 127.0.0.1 -p "$p" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
		for _ in $(seq 1 100); do
			kill -0 "${CLUSTER_PIDS[$i]}" 2>/dev/null || break
			sleep 0.05
		done
		kill -9 "${CLUSTER_PIDS[$i]}" 2>/dev/null || true
	done
	rm -rf "$CDIR"
	CLUSTER_PORTS=()
	CLUSTER_PIDS=()
}

cluster_reset() {
	local p
	for p in "${CLUSTER_PORTS[@]}"; do
		redis-cli -h 127.0.0.1 -p "$p" FLUSHALL SYNC >/dev/null
	done
}

# Empty Redis before a relay drain. With AOF, also rewrite the AOF so that every
# drain starts from a small file, and wait for the rewrite to finish.
redis_reset() {
	rcli FLUSHALL SYNC >/dev/null
	if [ "$MODE" = aof ]; then
		local info
		rcli BGREWRITEAOF >/dev/null
		for _ in $(seq 1 600); do
			info=$(rcli INFO persistence | tr -d '\r')
			grep -qx 'aof_rewrite_in_progress:0' <<<"$info" &&
				grep -qx 'aof_rewrite_scheduled:0' <<<"$info" && break
			sleep 0.1
		done
	fi
}

# ---------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------
wait_idle() {
	local mins=$1 t0 l
	[ "$mins" -gt 0 ] || return 0
	t0=$(date +%s)
	while :; do
		l=$(cut -d' ' -f1 /proc/loadavg)
		if awk -v l="$l" 'BEGIN { exit !(l < 1.0) }'; then
			log "load average $l < 1.0"
			return 0
		fi
		if [ $(($(date +%s) - t0)) -ge $((mins * 60)) ]; then
			log "load average still $l after $mins min; running anyway"
			return 0
		fi
		log "load average $l >= 1.0; waiting (up to $mins min)"
		sleep 20
	done
}

describe_env() {
	local mem
	mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
	echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "- command: \`$CMDLINE\`"
	echo "- machine: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), $mem RAM, kernel $(uname -r)"
	echo "- PostgreSQL: $("$PG_BINDIR/postgres" --version | sed 's/^postgres //'), wal2json $(dpkg-query -W -f '${Version}' postgresql-15-wal2json 2>/dev/null || echo '?')"
	echo "- Redis: $(redis-server --version | sed -n 's/.*\(v=[^ ]*\).*/\1/p'), unix socket; hiredis $("$RELAY_BIN" --version 2>/dev/null | sed -n 's/^hiredis \([^,]*\),.*/\1/p') (the relay's)"
	case " $MODES " in *" tls "*)
		echo "- mode tls: one redis-server (appendonly no) with a plain TCP port and a TLS port on 127.0.0.1 (server certificate from a throwaway EC P-256 CA, tls-auth-clients no); the relay verifies it with --redis-tls-ca-file" ;;
	esac
	case " $MODES " in *" plugins "*)
		echo "- mode plugins: one redis-server (appendonly no); pg_recvlogical and the relay with wal2json, and with pgoutput (publication bench_pub, inserts of public.outbox; pg_recvlogical with proto_version 1, messages true, as the relay asks), on the same backlog" ;;
	esac
	case " $MODES " in *" cluster "*)
		echo "- mode cluster: single node (appendonly no) on a unix socket and on 127.0.0.1 TCP; Redis Cluster of 3 masters, no replicas, 127.0.0.1 TCP, cluster-enabled yes, save '', appendonly no; every server on this machine" ;;
	esac
	echo "- relay: $RELAY_BIN ($("$RELAY_BIN" --version 2>&1 | head -n 1)); ${RELAY_SOURCE:-source: working tree of $ROOT at $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$ROOT" && [ -n "$(git status --porcelain -- lib cmd 2>/dev/null)" ] && echo ' with uncommitted changes in lib/ or cmd/')}"
	[ -z "$REDIS_CPU_QUOTA" ] || echo "- redis-server capped at $REDIS_CPU_QUOTA % of one core (REDIS_CPU_QUOTA: a CPU cgroup of its own, period 10 ms): Redis limits every drain"
	echo "- rounds per contender and shape: $ROUNDS"
}

# ---------------------------------------------------------------------------
# backlog shapes
# ---------------------------------------------------------------------------
# backlog_sql NAME: SQL that writes the backlog of shape NAME into public.outbox.
backlog_sql() {
	local n rows pad streams agg="'bench'"
	read -r n rows pad streams <<<"${SHAPE[$1]}"
	[ "$streams" = 1 ] || agg="'agg' || (i % $streams)"
	local padexpr="(SELECT left(string_agg(md5(random()::text || g), ''), $pad) FROM generate_series(1, $((pad / 32 + 1))) g)"
	local row="$agg, i::text, 'created', jsonb_build_object('n', i, 'amount', 1234.5, 'pad', pad)"
	local cols="public.outbox (aggregate_type, aggregate_id, event_type, payload)"
	if [ "$rows" = 1 ]; then
		echo "DO \$\$ DECLARE pad text := $padexpr; BEGIN
		  FOR i IN 1..$n LOOP INSERT INTO $cols VALUES ($row); COMMIT; END LOOP; END \$\$;"
	elif [ "$rows" = "$n" ]; then
		echo "DO \$\$ DECLARE pad text := $padexpr; BEGIN
		  INSERT INTO $cols SELECT $row FROM generate_series(1, $n) i; END \$\$;"
	else
		echo "DO \$\$ DECLARE pad text := $padexpr; BEGIN
		  FOR t IN 0..$((n / rows - 1)) LOOP
		    INSERT INTO $cols SELECT $row FROM generate_series(t * $rows + 1, (t + 1) * $rows) i;
		    COMMIT;
		  END LOOP; END \$\$;"
	fi
}

slot_name() { echo "${1}_$2"; } # slot_name CONTENDER ROUND

drop_all_slots() {
	psql_q -c "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots" >/dev/null
}

now_ns() { date +%s%N; }

# drain SHAPE ROUND CONTENDER EVENTS ENDPOS
drain() {
	local shape=$1 round=$2 c=$3 events=$4 endpos=$5 slot rc=0 args=() logf
	local n rows pad streams xpat=outbox:bench check=() rpids=(--pid "redis=$REDIS_PID") rsrv=() url p i
	read -r n rows pad streams <<<"${SHAPE[$shape]}"
	[ "$streams" = 1 ] || xpat='outbox:agg*'
	# mode cluster: also count distinct event ids (exactly-once check)
	[ "$MODE" = cluster ] && check=(--check-ids)
	slot=$(slot_name "$c" "$round")
	logf=$T/$MODE.$shape.$c.$round.log
	case $c in
	relay | relay_nodedup | relay_norecord | relay_function | relay_pgo | relay_pgo_nostream | relay_pgo_function | xadd_live) redis_reset; rsrv=(--redis "$RSOCK"); url="unix://$RSOCK" ;;
	relay_tcp) redis_reset; rsrv=(--redis "127.0.0.1:$SPORT"); url="redis://127.0.0.1:$SPORT" ;;
	relay_tls)
		redis_reset
		rsrv=(--redis "127.0.0.1:$SPORT") # stats over the plain port of the same server
		url="rediss://127.0.0.1:$TPORT"
		args=(--redis-tls-ca-file "$TLSDIR/ca.crt")
		;;
	relay_cluster)
		cluster_reset
		rpids=()
		for i in "${!CLUSTER_PORTS[@]}"; do
			rpids+=(--pid "redis=${CLUSTER_PIDS[$i]}")
			rsrv+=(--redis "127.0.0.1:${CLUSTER_PORTS[$i]}")
		done
		url=$CLUSTER_URL
		;;
	esac
	local common=(--json "$OUT/drains.jsonl" --meta "mode=$MODE" --meta "shape=$shape"
		--meta "contender=$c" --meta "round=$round" --meta "events=$events"
		"${rpids[@]}" --postmaster "$PM_PID" --stderr "$logf")
	case $c in
	pg_recvlogical)
		"$PY" "$BENCH_PY" run "${common[@]}" -- \
			"$PG_BINDIR/pg_recvlogical" --no-loop -d "$DSN" --slot "$slot" --start --endpos "$endpos" \
			"${W2J_O[@]}" -f /dev/null || rc=$?
		;;
	xadd_live) # the relay's entries of this round as bare XADDs, paced by a replication stream
		local resp=$T/bare.$shape.$round.resp
		[ -s "$resp" ] && [ -s "$resp.idx" ] && [ -s "$resp.group" ] ||
			die "xadd_live on $shape (round $round) needs the relay's entries of the round: put relay before it"
		"$PY" "$BENCH_PY" run "${common[@]}" "${rsrv[@]}" --xlen "$xpat" --stdout "$T/xadd_live.out" -- \
			"$T/xadd_gate" "$DSN" "$slot" "$W2J_SQL" "$resp" "$RSOCK" "$(cat "$resp.group")" || rc=$?
		if [ "$rc" = 0 ]; then
			grep -q "^replies: $events, errors: 0$" "$T/xadd_live.out" ||
				die "xadd_live on $shape (round $round): $(cat "$T/xadd_live.out") $(tail -n 3 "$logf")"
			[ "$(tail -n 1 "$OUT/drains.jsonl" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["redis"].get("xlen"))')" = "$events" ] ||
				die "xadd_live on $shape (round $round): XLEN is not $events"
		fi
		rm -f "$resp" "$resp.idx" "$resp.group"
		;;
	pg_recvlogical_pgo) # the options the relay sends pgoutput (PostgreSQL 14+)
		"$PY" "$BENCH_PY" run "${common[@]}" -- \
			"$PG_BINDIR/pg_recvlogical" --no-loop -d "$DSN" --slot "$slot" --start --endpos "$endpos" \
			-o proto_version=1 -o publication_names=bench_pub -o messages=true \
			-f /dev/null || rc=$?
		;;
	*)
		[ "$c" = relay_nodedup ] && args=(--dedup-window 0)
		[ "$c" = relay_norecord ] && args=(--dedup-record 0)
		[ "$c" = relay_pgo ] && args=(--plugin pgoutput --publication bench_pub)
		[ "$c" = relay_function ] && args=(--publish function)
		[ "$c" = relay_pgo_function ] && args=(--plugin pgoutput --publication bench_pub --publish function)
		[ "$c" = relay_pgo_nostream ] && args=(--plugin pgoutput --publication bench_pub --no-pgoutput-streaming)
		"$PY" "$BENCH_PY" run "${common[@]}" "${rsrv[@]}" --xlen "$xpat" "${check[@]}" -- \
			"$RELAY_BIN" --pg-dsn "$DSN" --slot "$slot" --no-create-slot \
			--redis-url "$url" --stream 'outbox:{aggregate_type}' --endpos "$endpos" --http-addr "" \
			--log-level info "${args[@]}" || rc=$?
		;;
	esac
	[ "$rc" = 0 ] || { tail -n 20 "$logf" >&2; die "$c on $shape (round $round) exited with $rc"; }
	if [ "${c#pg_recvlogical}" = "$c" ] && [ "$c" != xadd_live ]; then # a relay
		local pub xl di
		pub=$(sed -n 's/.*stopped (.*published=\([0-9]*\).*/\1/p' "$logf" | tail -n 1)
		read -r xl di < <(tail -n 1 "$OUT/drains.jsonl" | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.read())["redis"]
print(r.get("xlen"), r.get("distinct_ids", "-"))')
		[ "$pub" = "$events" ] && [ "$xl" = "$events" ] && { [ "$di" = - ] || [ "$di" = "$events" ]; } ||
			die "$c on $shape (round $round): published=$pub, XLEN=$xl, distinct ids=$di, expected $events"
		grep -o 'peak_rss_kb=[0-9]*' "$logf" | tail -n 1 >>"$T/peak_rss.$c" || true
		local nb fb
		nb=$(sed -n 's/.*stopped (.* native_batches=\([0-9]*\).*/\1/p' "$logf" | tail -n 1)
		fb=$(sed -n 's/.*stopped (.* function_batches=\([0-9]*\).*/\1/p' "$logf" | tail -n 1)
		if [ "${c%_function}" != "$c" ]; then # --publish function: no native batch
			[ "$nb" = 0 ] && [ -n "$fb" ] && [ "$fb" -gt 0 ] ||
				die "$c on $shape (round $round): native_batches=$nb function_batches=$fb, expected 0 and > 0"
		else # the default, --publish native: every batch written without the function
			[ -n "$nb" ] && [ "$nb" -gt 0 ] && [ "$fb" = 0 ] ||
				die "$c on $shape (round $round): native_batches=$nb function_batches=$fb, expected > 0 and 0"
		fi
	fi
	# issue 24, item 2: the same entries as bare XADDs, into the same Redis
	[ "$c" != relay ] || { [ "$MODE" != noaof ] && [ "$MODE" != aof ]; } || bare_replay "$shape" "$round" "$events" "$xpat"
	tail -n 1 "$OUT/drains.jsonl" | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.read())
ev = int(r["events"])
p = r["procs"]
g = lambda n: p.get(n, {}).get("pct", 0)
x = r.get("redis", {})
print("    %-15s round %s: %8.2f s  %9.0f events/s  client %4.0f%% (peak %3.0f%%)  walsender %4.0f%% (peak %3.0f%%)  redis %4.0f%%  machine %4.0f%%%s" % (
    r["contender"], r["round"], r["wall_s"], ev / r["wall_s"], g("child"), p.get("child", {}).get("peak_pct", 0),
    g("walsender"), p.get("walsender", {}).get("peak_pct", 0), g("redis"), g("machine"),
    ("  XLEN %s in %s streams, %s distinct ids" % (x["xlen"], x.get("streams"), x["distinct_ids"])) if "distinct_ids" in x else ""))'
}

# bare_replay SHAPE ROUND EVENTS PATTERN: after a drain of the relay
# (defaults), every entry it wrote (the streams matching PATTERN) read back
# and sent again as a bare XADD through redis-cli --pipe into the same
# redis-server, emptied first (redis_reset): Redis's CPU for the same entries
# without the relay's dedup and watermark, in the same mode and round, one
# line in $OUT/bare.jsonl. Redis's CPU is bench.py redis-stats' used_cpu_us,
# the figure drains.jsonl has for the drain.
bare_replay() {
	local n c0 c1 resp=$T/bare.$1.$2.resp
	rm -f "$T"/bare.*.resp "$T"/bare.*.resp.* # a round's, when no xadd_live took it
	n=$("$PY" "$BENCH_PY" bare "$RSOCK" "$4" "$resp") || die "bare XADD: reading back the relay's entries failed"
	[ "$n" = "$3" ] || die "bare XADD on $1 (round $2): $n entries read back, expected $3"
	redis_reset
	c0=$(redis_cpu_us)
	rcli --pipe <"$resp" >"$T/bare.pipe" 2>&1 || die "bare XADD: redis-cli --pipe: $(tail -n 3 "$T/bare.pipe")"
	c1=$(redis_cpu_us)
	[ -n "$c0" ] && [ -n "$c1" ] || die "bare XADD: bench.py redis-stats gave no used_cpu_us"
	grep -q "errors: 0," "$T/bare.pipe" || die "bare XADD on $1 (round $2): $(tail -n 3 "$T/bare.pipe")"
	n=$("$PY" "$BENCH_PY" bare "$RSOCK" "$4" /dev/null) || die "bare XADD: reading back the bare entries failed"
	[ "$n" = "$3" ] || die "bare XADD on $1 (round $2): $n entries added, expected $3"
	# $resp is kept for xadd_live in the same round, with the relay's events per EXEC
	tail -n 1 "$OUT/drains.jsonl" | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
assert r["contender"] == "relay", r["contender"]
print(max(1, round(int(r["events"]) / max(r["redis"]["calls"].get("exec", 0), 1))))' >"$resp.group" ||
		die "bare XADD on $1 (round $2): no events per EXEC from the relay's drain"
	echo "{\"mode\": \"$MODE\", \"shape\": \"$1\", \"round\": $2, \"events\": $3, \"used_cpu_us\": $((c1 - c0))}" >>"$OUT/bare.jsonl"
}
# redis_cpu_us: the redis-server's CPU so far, µs (bench.py redis-stats).
redis_cpu_us() {
	"$PY" "$BENCH_PY" redis-stats "$RSOCK" | sed -n 's/.*"used_cpu_us": \([0-9]*\).*/\1/p'
}

run_shape() {
	local shape=$1 n rows pad streams r c t0 t1 endpos
	local CONTENDERS
	CONTENDERS=$(contenders_for "$MODE")
	read -r n rows pad streams <<<"${SHAPE[$shape]}"
	log "[$MODE] shape $shape: $n events, $rows per transaction, ~${pad} B pad, $streams stream(s); load $(cut -d" " -f1-3 /proc/loadavg)"
	drop_all_slots
	psql_q -c "TRUNCATE public.outbox" -c "CHECKPOINT" >/dev/null
	# All slots in one psql session, one statement after the other, nothing else
	# writing: every slot starts before the first backlog row.
	{
		if [ "$MODE" = plugins ]; then
			echo "SET client_min_messages = warning; DROP PUBLICATION IF EXISTS bench_pub;"
			echo "CREATE PUBLICATION bench_pub FOR TABLE public.outbox WITH (publish = 'insert');"
		fi
		for r in $(seq 1 "$ROUNDS"); do
			for c in $CONTENDERS; do
				echo "SELECT pg_create_logical_replication_slot('$(slot_name "$c" "$r")', '$(plugin_of "$c")');"
			done
		done
	} | psql_q >/dev/null
	psql_q -c "SELECT min(confirmed_flush_lsn) || ' .. ' || max(confirmed_flush_lsn) || ' (' || count(*) || ' slots)' FROM pg_replication_slots" |
		sed 's/^/    slots at /'
	t0=$(now_ns)
	backlog_sql "$shape" | psql_q >/dev/null
	t1=$(now_ns)
	endpos=$(psql_q -c "SELECT pg_current_wal_lsn()")
	local wal
	wal=$(psql_q -c "SELECT pg_size_pretty(pg_current_wal_lsn() - min(confirmed_flush_lsn)) FROM pg_replication_slots")
	[ "$(psql_q -c "SELECT count(*) FROM public.outbox")" = "$n" ] || die "backlog of $shape has the wrong row count"
	log "    backlog written in $(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.1f", d / 1e9 }') s ($wal of WAL), end LSN $endpos"
	echo "{\"mode\": \"$MODE\", \"shape\": \"$shape\", \"events\": $n, \"write_s\": $(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.3f", d / 1e9 }'), \"wal\": \"$wal\"}" >>"$OUT/backlogs.jsonl"
	for r in $(seq 1 "$ROUNDS"); do
		for c in $CONTENDERS; do
			drain "$shape" "$r" "$c" "$n" "$endpos"
		done
	done
	drop_all_slots
}

# ---------------------------------------------------------------------------
# latency under steady load
# ---------------------------------------------------------------------------
# lat_step RATE RUNS_JSON NAME [--pid NAME=PID ...]: one producer step, pgbench at
# RATE single-row transactions per second for LAT_SECS, its CPU figures (and
# those of the given processes) appended to RUNS_JSON, its log in
# $OUT/pgbench.NAME.log.
lat_step() {
	local rate=$1 runs=$2 name=$3
	shift 3
	"$PY" "$BENCH_PY" run --json "$runs" --meta "tag=r$rate" --meta "pgbench_log=$OUT/pgbench.$name.log" \
		"$@" --postmaster "$PM_PID" --stdout "$OUT/pgbench.$name.log" --stderr "$T/pgbench.$name.err" -- \
		"$PG_BINDIR/pgbench" -n -M prepared -f "$T/lat.sql" -D "rate=$rate" -R "$rate" \
		-T "$LAT_SECS" -c 4 -j 2 -h "$T" -p "$PGPORT" -U postgres postgres ||
		{ cat "$T/pgbench.$name.err" >&2; die "pgbench at $rate/s ($name) failed"; }
}

run_latency() {
	local rate n x relay_pid cons_pid
	MODE=noaof
	log "latency: rates $LAT_RATES events/s, ${LAT_SECS} s each (Redis without AOF)"
	drop_all_slots
	psql_q -c "TRUNCATE public.outbox" -c "CHECKPOINT" >/dev/null
	cat >"$T/lat.sql" <<-'EOF'
		INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('lat', :client_id, 'r' || :rate, '{"n": 1}');
	EOF
	# shellcheck disable=SC2086 # LAT_RELAY_ARGS: extra relay options, a word list
	"$RELAY_BIN" --pg-dsn "$DSN" --slot lat --redis-url "unix://$RSOCK" --group bench \
		--http-addr "" --log-level info ${LAT_RELAY_ARGS:-} >"$T/lat.relay.log" 2>&1 &
	relay_pid=$!
	BG_PIDS+=("$relay_pid")
	echo "$relay_pid" >>"$T/bg.pids"
	for _ in $(seq 1 200); do
		[ "$(psql_q -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'lat'")" = t ] &&
			[ -n "$(rcli FUNCTION LIST LIBRARYNAME outbox_relay)" ] && break
		kill -0 "$relay_pid" 2>/dev/null || { cat "$T/lat.relay.log" >&2; die "relay exited at startup"; }
		sleep 0.1
	done
	"$PY" "$BENCH_PY" consumer "$RSOCK" outbox:lat "$T/receipts" &
	cons_pid=$!
	BG_PIDS+=("$cons_pid")
	echo "$cons_pid" >>"$T/bg.pids"
	sleep 1
	: >"$OUT/latency_runs.jsonl"
	for rate in $LAT_RATES; do
		lat_step "$rate" "$OUT/latency_runs.jsonl" "$rate" --pid "relay=$relay_pid" --pid "redis=$REDIS_PID"
		n=$(psql_q -c "SELECT count(*) FROM public.outbox")
		for _ in $(seq 1 600); do
			x=$(rcli XLEN outbox:lat)
			[ "$x" -ge "$n" ] && break
			sleep 0.1
		done
		log "    $rate/s: $(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$OUT/pgbench.$rate.log") tps (pgbench), stream holds $x of $n"
		sleep 1
	done
	kill -TERM "$cons_pid"
	wait "$cons_pid" || die "latency consumer failed"
	kill -TERM "$relay_pid"
	wait "$relay_pid" || die "relay (latency run) exited with $?"
	cp "$T/lat.relay.log" "$OUT/latency.relay.log"
	: >"$OUT/latency.jsonl"
	"$PY" "$BENCH_PY" latency "$RSOCK" outbox:lat "$T/receipts" "$OUT/latency.jsonl" "$OUT/latency_runs.jsonl"
	run_latency_floor
}

# The same rates right after with pg_recvlogical (the drains' wal2json options)
# in the relay's place and bench.py timestamping what it writes: commit →
# output read with no Redis hop and no consumer, through a Python reader.
run_latency_floor() {
	local rate n rl_pid rd_pid
	log "latency, pg_recvlogical pass: the same rates with pg_recvlogical in the relay's place"
	psql_q -c "SELECT pg_create_logical_replication_slot('latfloor', 'wal2json')" >/dev/null
	rm -f "$T/floor.fifo"
	mkfifo "$T/floor.fifo"
	"$PY" "$BENCH_PY" recvlat "$T/floor.fifo" "$OUT/latency.jsonl" "$OUT/latency_floor_runs.jsonl" &
	rd_pid=$!
	BG_PIDS+=("$rd_pid")
	"$PG_BINDIR/pg_recvlogical" -d "$DSN" --slot latfloor --start -f - -F 0 \
		"${W2J_O[@]}" >"$T/floor.fifo" 2>"$T/floor.err" &
	rl_pid=$!
	BG_PIDS+=("$rl_pid")
	echo "$rl_pid" >>"$T/bg.pids"
	for _ in $(seq 1 200); do
		[ "$(psql_q -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'latfloor'")" = t ] && break
		kill -0 "$rl_pid" 2>/dev/null || { cat "$T/floor.err" >&2; die "pg_recvlogical exited at startup"; }
		sleep 0.1
	done
	sleep 1
	: >"$OUT/latency_floor_runs.jsonl"
	for rate in $LAT_RATES; do
		lat_step "$rate" "$OUT/latency_floor_runs.jsonl" "floor.$rate" --pid "pg_recvlogical=$rl_pid" --pid "reader=$rd_pid"
		n=$(psql_q -c "SELECT pg_current_wal_lsn()")
		for _ in $(seq 1 600); do
			[ "$(psql_q -c "SELECT confirmed_flush_lsn >= '$n' FROM pg_replication_slots WHERE slot_name = 'latfloor'")" = t ] && break
			sleep 0.1
		done
		log "    $rate/s: $(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$OUT/pgbench.floor.$rate.log") tps (pgbench)"
		sleep 1
	done
	kill -TERM "$rl_pid"
	wait "$rl_pid" || true # pg_recvlogical ends with 1 on a signal
	wait "$rd_pid" || die "latency reader of the pg_recvlogical pass failed"
	psql_q -c "SELECT pg_drop_replication_slot('latfloor')" >/dev/null
}

# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
wait_idle "$WAIT_IDLE"
log "relay: $RELAY_BIN; temp dir $T; results in $OUT"
: >"$OUT/drains.jsonl"
: >"$OUT/bare.jsonl"
: >"$OUT/backlogs.jsonl"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(date +%s)
pg_start
for MODE in $MODES; do
	if [ "$MODE" = cluster ]; then
		SPORT=$(free_port)
		redis_start noaof "$SPORT"
		cluster_start
	elif [ "$MODE" = tls ]; then
		tls_setup
		SPORT=$(free_port)
		TPORT=$(free_port)
		REDIS_EXTRA=(--tls-port "$TPORT" --tls-cert-file "$TLSDIR/server.crt" --tls-key-file "$TLSDIR/server.key"
			--tls-ca-cert-file "$TLSDIR/ca.crt" --tls-auth-clients no)
		redis_start noaof "$SPORT"
		REDIS_EXTRA=()
		log "redis: TCP 127.0.0.1:$SPORT and TLS 127.0.0.1:$TPORT (one server), unix socket $RSOCK"
	else
		redis_start "$MODE"
	fi
	for shape in $(shapes_for "$MODE"); do
		run_shape "$shape"
	done
	redis_stop
	[ "$MODE" != cluster ] || cluster_stop
done
if [ "$LATENCY" = 1 ]; then
	redis_start noaof
	run_latency
	redis_stop
fi
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
{
	echo "## Environment"
	echo
	describe_env
	echo "- load average (1/5/15 min): $LOAD_START at start, $LOAD_END at the end; total run time $(($(date +%s) - T_START)) s"
	echo
	echo "## Results"
	echo
	"$PY" "$BENCH_PY" report "$OUT/drains.jsonl" "$OUT/backlogs.jsonl" \
		"$([ "$LATENCY" = 1 ] && echo "$OUT/latency.jsonl")"
} >"$OUT/report.md"
cat "$OUT/report.md"
log "report: $OUT/report.md (raw data: drains.jsonl, backlogs.jsonl, latency*.jsonl)"
