# lib.sh - harness for the outbox-relay integration tests. Source it, then call
# setup_tmp first:
#
#   . "$(dirname "$0")/lib.sh"
#   setup_tmp
#   pg_start; load_schema; redis_start
#   ...
#   pass
#
# Every test gets a private temp dir $T holding its own PostgreSQL 15 cluster
# (unix socket $T/.s.PGSQL.$PGPORT, no TCP) and redis-server (unix socket
# $T/redis.sock, no TCP), so tests run in parallel without sharing anything.
# An EXIT trap, plus a detached watchdog in case the test shell itself is
# SIGKILLed, stops every relay, PostgreSQL and Redis it started and removes $T.
#
# Works as root (CI: PostgreSQL runs as "postgres" through runuser) and as a
# normal user. Environment:
#   RELAY_BIN        the outbox-relay binary (set by meson)
#   TESTS_DIR        the tests/ source dir (set by meson); sql/outbox.sql is found from it
#   RELAY_TIMEOUT    seconds relay_run/relay_run_until may take (default 90)
#   RELAY_LOG_LEVEL  --log-level passed by relay_start/relay_run* (default debug)
#   KEEP_TMP=1       keep $T after the test for debugging (servers are still stopped)
#   PG_FRESH_INITDB=1  pg_start runs initdb rather than copying the run's template
#                    cluster (see _pg_initdb): a new system identifier
#   PG_CHROOT=DIR    run PostgreSQL inside the chroot DIR (deploy/pg-chroot.sh: a
#                    newer Debian release's postgresql-NN + wal2json, whose
#                    binaries need that release's glibc); root only. $T is then
#                    created in DIR/tmp, so the relay and psql on the host reach
#                    the socket at the same host path; PostgreSQL is given the
#                    path it sees (without the DIR prefix).
#   PG_MAJOR=NN      with PG_CHROOT: the major version installed in it (default:
#                    the one deploy/pg-chroot.sh recorded in DIR/.outbox-pg-chroot)
#   REDIS_CHROOT=DIR run every Redis server inside the chroot DIR (deploy/pg-chroot.sh
#                    with the extra packages redis-server valkey-server); root
#                    only. $T is created in DIR/tmp as with PG_CHROOT (when both
#                    are set they must be the same DIR) and the server is given
#                    the paths it sees; redis-cli and the relay stay on the host.
#   REDIS_SERVER=B   with REDIS_CHROOT: the server binary in it, redis-server
#                    (default) or valkey-server

set -Eeuo pipefail

TEST_NAME=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$_LIB_DIR/../python_path.sh"
TESTS_DIR=${TESTS_DIR:-$(cd "$_LIB_DIR/.." && pwd)}
SQL_FILE=${SQL_FILE:-$TESTS_DIR/../sql/outbox.sql}
RX="python3 $_LIB_DIR/rx.py"
PGPORT=5433
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PG_CHROOT=${PG_CHROOT:-}
REDIS_CHROOT=${REDIS_CHROOT:-}
REDIS_CHROOT=${REDIS_CHROOT%/}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
if [ -n "$PG_CHROOT" ]; then
	PG_CHROOT=${PG_CHROOT%/}
	PG_MAJOR=${PG_MAJOR:-$(sed -n 's/^PG_MAJOR=//p' "$PG_CHROOT/.outbox-pg-chroot" 2>/dev/null || true)}
	PG_BINDIR=/usr/lib/postgresql/$PG_MAJOR/bin # as seen inside the chroot
fi
RELAY_TIMEOUT=${RELAY_TIMEOUT:-90}
RELAY_LOG_LEVEL=${RELAY_LOG_LEVEL:-debug}
if [ -z "${RELAY_BIN:-}" ]; then
	RELAY_BIN=$(cd "$TESTS_DIR/.." && pwd)/build/cmd/outbox-relay/outbox-relay
fi
# outbox-consume of the same build (tests that run it call need_consume_bin)
CONSUME_BIN=${CONSUME_BIN:-$(dirname "$RELAY_BIN")/../outbox-consume/outbox-consume}
need_consume_bin() {
	[ -x "$CONSUME_BIN" ] || fail "outbox-consume not found at $CONSUME_BIN"
}

T=
PGDATA=
RELAY_PID=
RELAY_BG_N= # number of the background relay (relay_start)
RELAY_N=0
RELAY_LOG=
RELAY_RC=
REDIS_PID=
_WATCHDOG_PID=
# _now: the wall clock in nanoseconds into $_NOW_NS, from bash's
# EPOCHREALTIME (microseconds; any decimal separator stripped), not date(1):
# a test logs and polls thousands of times, and a fork and exec each was a
# few percent of the suite's CPU.
_now() { _NOW_NS=$((${EPOCHREALTIME//[!0-9]/} * 1000)); }
# _ms_since T0_NS: milliseconds from T0_NS (a $_NOW_NS) to now.
_ms_since() {
	_now
	echo $(((_NOW_NS - $1) / 1000000))
}
_now
_T0=$_NOW_NS

# ---------------------------------------------------------------------------
# messages and assertions
# ---------------------------------------------------------------------------

# Elapsed seconds since the test started, e.g. "3.25".
elapsed() {
	_elapsed
	printf '%s' "$_ELAPSED"
}
# _elapsed: the same into $_ELAPSED, without a subshell.
_elapsed() {
	_now
	local ns=$((_NOW_NS - _T0))
	printf -v _ELAPSED '%d.%02d' $((ns / 1000000000)) $((ns / 10000000 % 100))
}

# head_n N: like head -n N but reads all its input, so the writer never gets
# SIGPIPE (which pipefail and the ERR trap would turn into a failure).
head_n() { sed -n "1,${1}p"; }

log() {
	_elapsed
	printf '[%s %6ss] %s\n' "$TEST_NAME" "$_ELAPSED" "$*"
}

# A passed check: prints "ok - what".
ok() {
	_elapsed
	printf '[%s %6ss] ok - %s\n' "$TEST_NAME" "$_ELAPSED" "$*"
}

# Print the tail of every log we own; called on failure.
dump_logs() {
	local f
	[ -n "$T" ] && [ -d "$T" ] || return 0
	for f in "$T"/relay.*.log "$T/pg.log" "$T/redis.log"; do
		[ -f "$f" ] || continue
		echo "----- last 40 lines of $(basename "$f") -----"
		tail -n 40 "$f" | cut -c1-400
	done
	echo "-----"
}

# fail MESSAGE: print a diagnostic and the logs, exit 1 (the EXIT trap cleans up).
fail() {
	trap - ERR
	printf '[%s %6ss] FAIL: %s\n' "$TEST_NAME" "$(elapsed)" "$*" >&2
	# In a $(...) subshell the caller fails next and dumps the logs itself.
	[ "$BASH_SUBSHELL" -gt 0 ] || dump_logs >&2
	exit 1
}

_on_err() {
	fail "command failed (rc=$1) at $(basename "${BASH_SOURCE[1]:-?}"):$2: $3"
}
trap '_on_err $? $LINENO "$BASH_COMMAND"' ERR

# assert_eq EXPECTED ACTUAL WHAT
assert_eq() {
	if [ "$1" != "$2" ]; then
		fail "$3: expected [$1], got [$2]"
	fi
	ok "$3 ($2)"
}

# assert_ne UNEXPECTED ACTUAL WHAT
assert_ne() {
	if [ "$1" = "$2" ]; then
		fail "$3: expected anything but [$1]"
	fi
	ok "$3 ($2)"
}

# assert_ge A B WHAT: integer A >= B
assert_ge() {
	if ! [ "$1" -ge "$2" ] 2>/dev/null; then
		fail "$3: expected $1 >= $2"
	fi
	ok "$3 ($1 >= $2)"
}

# assert_lt A B WHAT: integer A < B
assert_lt() {
	if ! [ "$1" -lt "$2" ] 2>/dev/null; then
		fail "$3: expected $1 < $2"
	fi
	ok "$3 ($1 < $2)"
}

# assert_contains HAYSTACK NEEDLE WHAT: fixed-string match
assert_contains() {
	case "$1" in
	*"$2"*) ok "$3 (contains '$2')" ;;
	*) fail "$3: expected to contain [$2], got [${1:0:2000}]" ;;
	esac
}

# assert_not_contains HAYSTACK NEEDLE WHAT
assert_not_contains() {
	case "$1" in
	*"$2"*) fail "$3: expected not to contain [$2], got [${1:0:2000}]" ;;
	*) ok "$3 (no '$2')" ;;
	esac
}

# assert_match STRING EXTENDED_REGEX WHAT
assert_match() {
	if ! grep -Eq -- "$2" <<<"$1"; then
		fail "$3: [${1:0:2000}] does not match /$2/"
	fi
	ok "$3"
}

# assert_lsn_ge A B WHAT
assert_lsn_ge() {
	if ! lsn_ge "$1" "$2"; then
		fail "$3: expected LSN $1 >= $2"
	fi
	ok "$3 ($1 >= $2)"
}

# assert_lsn_lt A B WHAT
assert_lsn_lt() {
	if lsn_ge "$1" "$2"; then
		fail "$3: expected LSN $1 < $2"
	fi
	ok "$3 ($1 < $2)"
}

# pass: the final line of a passing test.
pass() {
	log "PASS"
	exit 0
}

# skip REASON: exit 77, which meson reports as SKIP.
skip() {
	log "SKIP: $*"
	exit 77
}

# ---------------------------------------------------------------------------
# temp dir, cleanup, watchdog
# ---------------------------------------------------------------------------

is_root() { [ "$(id -u)" = 0 ]; }

# pid_alive PID: the process exists and is not a zombie (daemons we start are
# reparented to PID 1, which may reap them late; kill -0 succeeds on zombies).
pid_alive() {
	local st
	[ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
	st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\).*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# as_pg CMD...: run as the postgres OS user when we are root. With PG_CHROOT:
# inside the chroot, as its postgres user, with every host path under
# $PG_CHROOT/ in the arguments rewritten to the path seen inside.
as_pg() {
	if [ -n "$PG_CHROOT" ]; then
		local a args=()
		for a in "$@"; do
			args+=("${a//"$PG_CHROOT/"//}")
		done
		chroot "$PG_CHROOT" runuser -u postgres -- "${args[@]}"
	elif is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# Kill whatever the files in dir $1 say we started. Used by the EXIT trap and,
# with the same code, by the watchdog. Idempotent.
_kill_all_in() {
	local t=$1 p i pgpid
	if [ -f "$t/relay.pids" ]; then
		while read -r p; do
			[ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
		done <"$t/relay.pids"
	fi
	if [ -f "$t/pg/postmaster.pid" ]; then
		pgpid=$(head -n 1 "$t/pg/postmaster.pid" 2>/dev/null || true)
		if [ -n "$pgpid" ] && pid_alive "$pgpid"; then
			kill -QUIT "$pgpid" 2>/dev/null || true # immediate shutdown
			for i in $(seq 1 50); do
				pid_alive "$pgpid" || break
				sleep 0.1
			done
			kill -9 "$pgpid" 2>/dev/null || true
		fi
	fi
	if [ -f "$t/redis.pids" ]; then
		while read -r p; do
			[ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
		done <"$t/redis.pids"
	fi
}

_cleanup() {
	local rc=$?
	trap - ERR EXIT INT TERM HUP
	set +e
	exec 2>/dev/null # no "Killed" job notices for the relays we SIGKILL
	if [ -n "$T" ] && [ -d "$T" ]; then
		# Ask PostgreSQL to stop properly first (fast), fall back to signals.
		if [ -f "$T/pg/postmaster.pid" ]; then
			as_pg "$PG_BINDIR/pg_ctl" -D "$T/pg" -m immediate -w -t 10 stop >/dev/null 2>&1
		fi
		_kill_all_in "$T"
		if [ "${KEEP_TMP:-0}" = 1 ] || { [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "${KEEP_TMP_ON_FAIL:-0}" = 1 ]; }; then
			log "kept $T"
		else
			rm -rf "$T"
		fi
	fi
	[ -n "$_WATCHDOG_PID" ] && kill "$_WATCHDOG_PID" 2>/dev/null
	# Reap what we killed, so bash does not report "Killed" jobs.
	wait 2>/dev/null
	exit "$rc"
}

# setup_tmp: create $T, install the cleanup trap and the watchdog.
setup_tmp() {
	[ -x "$RELAY_BIN" ] || [ "${NEED_RELAY:-1}" = 0 ] || fail "RELAY_BIN=$RELAY_BIN is not executable"
	if [ -n "$REDIS_CHROOT" ]; then
		is_root || fail "REDIS_CHROOT=$REDIS_CHROOT needs root (chroot)"
		[ -z "$PG_CHROOT" ] || [ "${PG_CHROOT%/}" = "$REDIS_CHROOT" ] ||
			fail "PG_CHROOT=$PG_CHROOT and REDIS_CHROOT=$REDIS_CHROOT differ; use one chroot for both"
		chroot "$REDIS_CHROOT" sh -c 'command -v "$1"' sh "$REDIS_SERVER" >/dev/null ||
			fail "no $REDIS_SERVER inside REDIS_CHROOT=$REDIS_CHROOT (see deploy/pg-chroot.sh)"
		log "Redis servers: $(chroot "$REDIS_CHROOT" "$REDIS_SERVER" --version | cut -d' ' -f1-3) inside $REDIS_CHROOT"
	fi
	if [ -n "$PG_CHROOT" ]; then
		is_root || fail "PG_CHROOT=$PG_CHROOT needs root (chroot)"
		[ -x "$PG_CHROOT$PG_BINDIR/postgres" ] ||
			fail "no $PG_BINDIR/postgres inside PG_CHROOT=$PG_CHROOT (PG_MAJOR=${PG_MAJOR:-unset}; see deploy/pg-chroot.sh)"
		mountpoint -q "$PG_CHROOT/proc" || fail "proc is not mounted on $PG_CHROOT/proc (deploy/pg-chroot.sh mounts it)"
		T=$(mktemp -d "$PG_CHROOT/tmp/outbox-it.XXXXXXXX")
		chmod 755 "$T"
		# The chroot's postgres user, whose uid is not the host's.
		chown "$(awk -F: '$1 == "postgres" { print $3 ":" $4 }' "$PG_CHROOT/etc/passwd")" "$T"
	elif [ -n "$REDIS_CHROOT" ]; then
		T=$(mktemp -d "$REDIS_CHROOT/tmp/outbox-it.XXXXXXXX")
		chmod 755 "$T"
		chown postgres:postgres "$T" # PostgreSQL runs on the host
	else
		T=$(mktemp -d "${TMPDIR:-/tmp}/outbox-it.XXXXXXXX")
		chmod 755 "$T"
		if is_root; then
			chown postgres:postgres "$T"
		fi
	fi
	: >"$T/relay.pids"
	: >"$T/redis.pids"
	trap _cleanup EXIT
	trap 'exit 143' TERM
	trap 'exit 130' INT
	trap 'exit 129' HUP
	# Watchdog: if this shell dies without running its EXIT trap (SIGKILL,
	# meson timeout escalation), stop the servers anyway. setsid: meson kills
	# the test's process group, and PostgreSQL/Redis daemonize out of it.
	setsid bash -c '
		parent=$1; t=$2; shift 2
		'"$(declare -f pid_alive _kill_all_in)"'
		while kill -0 "$parent" 2>/dev/null; do sleep 1; done
		[ -d "$t" ] || exit 0
		_kill_all_in "$t"
		rm -rf "$t"
	' watchdog $$ "$T" </dev/null >/dev/null 2>&1 &
	_WATCHDOG_PID=$!
	log "tmp dir $T (uid $(id -u))"
}

# wait_for "SHELL CONDITION" TIMEOUT_S [WHAT]: poll every 0.1 s; returns 1 on timeout.
wait_for() {
	local cond=$1 timeout=${2:-10} deadline
	_now
	deadline=$((_NOW_NS + timeout * 1000000000))
	while :; do
		if eval "$cond" >/dev/null 2>&1; then
			return 0
		fi
		_now
		if [ "$_NOW_NS" -ge "$deadline" ]; then
			return 1
		fi
		sleep 0.1
	done
}

# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------

PG_DSN=
_PG_GUCS= # postgres --describe-config names, read once (pg_has_setting)

# pg_has_setting NAME: succeeds when this server binary knows the setting.
# Debian's 15.19+ and 17 builds have output_plugin_libraries; 15.18 and
# upstream do not, and refuse to start with it in postgresql.conf.
pg_has_setting() {
	if [ -n "$PG_CHROOT" ]; then
		[ -n "$_PG_GUCS" ] || _PG_GUCS=$(chroot "$PG_CHROOT" "$PG_BINDIR/postgres" --describe-config 2>/dev/null | cut -f1)
	else
		[ -n "$_PG_GUCS" ] || _PG_GUCS=$("$PG_BINDIR/postgres" --describe-config 2>/dev/null | cut -f1)
	fi
	grep -qx "$1" <<<"$_PG_GUCS"
}

# _pg_initdb DIR: a new cluster in DIR (which does not exist yet). initdb costs
# about a second of CPU on a 2-core CI machine and every test makes a cluster,
# so the first initdb of a PostgreSQL major on this machine is kept as a
# template beside the tests' temp dirs (outbox-pg-template.<major>.<uid>, made
# under a temporary name and renamed whole, so a test never copies half of
# one) and later clusters are copies (0.1 s). A copy has the template's system
# identifier: PG_FRESH_INITDB=1 runs initdb itself, for a test that needs a
# second, different system.
_pg_initdb() {
	local dir=$1 tpl tmp
	if [ "${PG_FRESH_INITDB:-0}" != 1 ]; then
		tpl=$(dirname "$T")/outbox-pg-template.$(basename "$(dirname "$PG_BINDIR")").$(id -u)
		if [ ! -f "$tpl/PG_VERSION" ]; then
			tmp=$(mktemp -d "$tpl.XXXXXXXX")
			chown --reference="$T" "$tmp"
			# A failed initdb here is run (and reported) again below.
			! _initdb "$tmp/data" || mv -T "$tmp/data" "$tpl" 2>/dev/null || true # another test's came first
			rm -rf "$tmp"
		fi
		[ -f "$tpl/PG_VERSION" ] && cp -a "$tpl" "$dir" && return 0
		rm -rf "$dir"
	fi
	_initdb "$dir" || { cat "$T/initdb.log" >&2; fail "initdb failed"; }
}
# _initdb DIR: initdb as the postgres user, its output in $T/initdb.log.
_initdb() {
	as_pg "$PG_BINDIR/initdb" -D "$1" -U postgres -A trust -E UTF8 --locale=C \
		--no-sync --no-instructions >"$T/initdb.log" 2>&1
}

# pg_start [EXTRA -c settings...]: initdb (first time) and start PostgreSQL 15
# (PG_CHROOT: the chroot's)
# with logical decoding enabled. Extra args are passed as "-c name=value".
pg_start() {
	local t0 opts a
	_now
	t0=$_NOW_NS
	PGDATA=$T/pg
	PG_DSN="host=$T port=$PGPORT user=postgres dbname=postgres"
	if [ ! -d "$PGDATA" ]; then
		_pg_initdb "$PGDATA"
		cat >>"$PGDATA/postgresql.conf" <<-EOF
			listen_addresses = ''
			unix_socket_directories = '${T#"$PG_CHROOT"}'
			port = $PGPORT
			wal_level = logical
			max_wal_senders = 10
			max_replication_slots = 10
			fsync = off
			full_page_writes = off
			synchronous_commit = on
			timezone = 'UTC'
			shared_buffers = 32MB
			max_connections = 30
			log_line_prefix = '%m [%p] %q%a '
			log_min_messages = warning
			log_connections = off
		EOF
		if pg_has_setting output_plugin_libraries; then
			# pgoutput runs (RELAY_PLUGIN) prove the relay needs nothing else: wal2json is not allowed.
			if [ "${RELAY_PLUGIN:-}" = pgoutput ]; then
				echo "output_plugin_libraries = 'pgoutput,test_decoding'" >>"$PGDATA/postgresql.conf"
			else
				echo "output_plugin_libraries = 'pgoutput,test_decoding,wal2json'" >>"$PGDATA/postgresql.conf"
			fi
		fi
		if [ -n "$PG_CHROOT" ]; then
			# The chroot has no /dev/shm.
			echo "dynamic_shared_memory_type = mmap" >>"$PGDATA/postgresql.conf"
		fi
	fi
	opts=""
	# PG_START_OPTS: settings every start of this run gets (meson's pgostream variant:
	# logical_decoding_work_mem=64kB, so that pgoutput streams large transactions)
	for a in ${PG_START_OPTS:-} "$@"; do
		opts="$opts -c $a"
	done
	as_pg "$PG_BINDIR/pg_ctl" -D "$PGDATA" -l "$T/pg.log" -w -t 30 ${opts:+-o "$opts"} start >/dev/null ||
		fail "pg_ctl start failed"
	log "PostgreSQL started in $(_ms_since "$t0") ms"
}

# pg_stop [fast|immediate|smart]
pg_stop() {
	# A fast stop waits for a logical walsender until its client confirmed what it
	# was sent: the relay confirms only what Redis acknowledged, so a Redis that is
	# loading its AOF holds the stop up. 120 s: the bound is not the speed under test.
	as_pg "$PG_BINDIR/pg_ctl" -D "$PGDATA" -m "${1:-fast}" -w -t 120 stop >/dev/null ||
		fail "pg_ctl stop failed"
}

# pg_restart [fast|immediate]
pg_restart() {
	pg_stop "${1:-fast}"
	pg_start
}

# psql_q ["SQL"]: run SQL (or stdin when no argument) as postgres on the test
# db; unaligned, tuples only, quiet; stops at the first error.
psql_q() {
	if [ $# -gt 0 ]; then
		psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$T" -p "$PGPORT" -U postgres -d postgres -c "$1"
	else
		psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$T" -p "$PGPORT" -U postgres -d postgres -f -
	fi
}

# load_schema: run sql/outbox.sql.
load_schema() {
	PGOPTIONS='-c client_min_messages=warning' psql -X -q -v ON_ERROR_STOP=1 -h "$T" -p "$PGPORT" -U postgres -d postgres -f "$SQL_FILE" >/dev/null ||
		fail "loading $SQL_FILE failed"
}

current_lsn() { psql_q "SELECT pg_current_wal_lsn()"; }

# pg_version_num: the running server's server_version_num (150018, 170012, ...),
# for the few assertions whose server message differs between major versions.
pg_version_num() { psql_q "SHOW server_version_num"; }

# slot_create NAME [PLUGIN [TABLE]]: create a logical slot through SQL (default
# $RELAY_PLUGIN, else wal2json). pgoutput: the publication NAME of TABLE
# (default public.outbox) first, as the relay does (a slot made before its
# publication cannot decode what it holds from before it).
slot_create() {
	local plugin=${2:-${RELAY_PLUGIN:-wal2json}}
	if [ "$plugin" = pgoutput ] && [ -z "$(psql_q "SELECT 1 FROM pg_publication WHERE pubname = '$1'")" ]; then
		psql_q "CREATE PUBLICATION \"$1\" FOR TABLE ${3:-public.outbox} WITH (publish = 'insert')" >/dev/null
	fi
	psql_q "SELECT lsn FROM pg_create_logical_replication_slot('$1', '$plugin')" >/dev/null
}

# The application: app_start TAG commits outbox rows until app_stop, one
# transaction per iteration 5 ms apart (every third has a second event of the
# same aggregate, "TAG-<i>"), in one background psql session; rows_now counts
# the rows, wait_rows N waits until N more were committed.
rows_now() { psql_q "SELECT count(*) FROM outbox"; }
wait_rows() {
	local want=$(($(rows_now) + $1))
	wait_for "[ \"\$(rows_now)\" -ge $want ]" 30 || fail "the application loop stalled"
}
app_start() {
	psql_q "CREATE TABLE IF NOT EXISTS app_ctl (stop int); DELETE FROM app_ctl" >/dev/null
	psql_q "DO \$\$ DECLARE i int := 0; BEGIN
		LOOP
			i := i + 1;
			PERFORM outbox_emit('order', '$1-' || i, 'created', '{}');
			IF i % 3 = 0 THEN PERFORM outbox_emit('order', '$1-' || i, 'paid', '{}'); END IF;
			COMMIT;
			EXIT WHEN EXISTS (SELECT 1 FROM app_ctl);
			PERFORM pg_sleep(0.005);
		END LOOP;
	END \$\$" >/dev/null &
	APP_PID=$!
}
app_stop() {
	psql_q "INSERT INTO app_ctl VALUES (1)" >/dev/null
	wait "$APP_PID" || fail "the application loop failed"
}

# slot_confirmed_lsn SLOT: confirmed_flush_lsn, empty when the slot does not exist.
slot_confirmed_lsn() {
	psql_q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$1'"
}

# slot_active SLOT: succeeds when a walsender is streaming from SLOT.
slot_active() {
	[ "$(psql_q "SELECT active FROM pg_replication_slots WHERE slot_name = '$1'")" = t ]
}

# lsn_to_int X/Y: print the LSN as a decimal integer.
lsn_to_int() {
	local hi=${1%/*} lo=${1#*/}
	case "$1" in
	*/*) ;;
	*)
		echo "lsn_to_int: bad LSN [$1]" >&2
		return 1
		;;
	esac
	echo $(((16#$hi << 32) | 16#$lo))
}

# lsn_ge A B: succeeds when LSN A >= LSN B (an empty A is never >=).
lsn_ge() {
	[ -n "$1" ] && [ -n "$2" ] || return 1
	local a b
	a=$(lsn_to_int "$1") && b=$(lsn_to_int "$2") || return 1
	[ "$a" -ge "$b" ]
}

# wait_confirmed SLOT LSN TIMEOUT: wait until the slot's confirmed_flush_lsn >= LSN.
wait_confirmed() {
	wait_for "lsn_ge \"\$(slot_confirmed_lsn $1)\" $2" "${3:-20}"
}

# ---------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------

REDIS_SOCK=
REDIS_URL=
REDIS_PASSWORD= # set by redis_start --requirepass X; used by redis_cli, rx, redis_stop

# redis_server ARGS...: run the Redis server binary: redis-server on the host,
# or with REDIS_CHROOT $REDIS_SERVER inside it, $REDIS_CHROOT/ in the
# arguments rewritten to the path seen inside (pids are the host's).
redis_server() { _redis_run "$REDIS_SERVER" "$@"; }

# _redis_run BIN ARGS...: BIN (the server or a tool beside it) where the
# server runs: on the host, or inside REDIS_CHROOT with the paths rewritten.
_redis_run() {
	local bin=$1 a args=()
	shift
	if [ -n "$REDIS_CHROOT" ]; then
		for a in "$@"; do
			args+=("${a//"$REDIS_CHROOT/"//}")
		done
		chroot "$REDIS_CHROOT" "$bin" "${args[@]}"
	else
		"$bin" "$@"
	fi
}

# redis_start [extra redis-server args]: unix socket only, no persistence by
# default; pass e.g. --appendonly yes --appendfsync always for AOF tests (data
# lives in $T/redis and survives redis_stop/redis_start).
redis_start() { redis_start_try "$@" || fail "$REDIS_START_ERR"; }

# redis_start_try [args]: redis_start for a server that may refuse to start
# (a damaged AOF): returns 1 with the reason in REDIS_START_ERR and REDIS_PID
# empty instead of failing.
redis_start_try() {
	local t0 a prev=
	_now
	t0=$_NOW_NS
	REDIS_PASSWORD=
	for a in "$@"; do
		[ "$prev" = --requirepass ] && REDIS_PASSWORD=$a
		prev=$a
	done
	export REDIS_PASSWORD
	REDIS_SOCK=$T/redis.sock
	REDIS_URL=unix://$REDIS_SOCK
	REDIS_PID=
	mkdir -p "$T/redis"
	rm -f "$T/redis.pid"
	if ! redis_server --port 0 --unixsocket "$REDIS_SOCK" --unixsocketperm 700 \
		--save '' --appendonly no --dir "$T/redis" \
		--daemonize yes --pidfile "$T/redis.pid" --logfile "$T/redis.log" "$@"; then
		REDIS_START_ERR="redis-server failed to start"
		return 1
	fi
	if ! wait_for "[ -s '$T/redis.pid' ]" 10; then
		REDIS_START_ERR="redis-server wrote no pidfile"
		return 1
	fi
	REDIS_PID=$(cat "$T/redis.pid")
	echo "$REDIS_PID" >>"$T/redis.pids"
	# Loading a large AOF (a long soak's: gigabytes) takes as long as it takes
	# on this machine: wait while the server lives, bounded generously.
	wait_for '! pid_alive "$REDIS_PID" || [ "$(redis_cli ping)" = PONG ]' 600
	if [ "$(redis_cli ping 2>/dev/null)" != PONG ]; then
		pid_alive "$REDIS_PID" || REDIS_PID=
		REDIS_START_ERR="redis-server does not answer PING"
		return 1
	fi
	log "redis started in $(_ms_since "$t0") ms (pid $REDIS_PID)"
}

# redis_cli ARGS...: redis-cli --raw on the test socket.
redis_cli() {
	if [ -n "${REDIS_PASSWORD:-}" ]; then
		REDISCLI_AUTH=$REDIS_PASSWORD redis-cli -s "$REDIS_SOCK" --raw "$@"
	else
		redis-cli -s "$REDIS_SOCK" --raw "$@"
	fi
}

# redis_down: succeeds once the redis-server process we started is gone.
redis_down() { [ -z "$REDIS_PID" ] || ! pid_alive "$REDIS_PID"; }

# redis_stop [nosave|save]: SHUTDOWN and wait for the process to exit.
redis_stop() {
	[ -n "$REDIS_PID" ] || return 0
	redis_cli shutdown "${1:-nosave}" >/dev/null 2>&1 || true
	if ! wait_for redis_down 10; then
		kill -9 "$REDIS_PID" 2>/dev/null || true
		wait_for redis_down 5 || fail "redis-server pid $REDIS_PID does not exit"
	fi
	REDIS_PID=
}

# redis_aof_repair: what an operator does before starting again a server
# with AOF that was SIGKILLed (or lost power): <server>-check-aof --fix on the
# manifest of $T/redis. A kill can cut the last incr file inside a MULTI/EXEC
# block the server never acknowledged. Redis 7.0.15 and 8.0.6 and Valkey 8.1.1
# then truncate at the last whole command and keep the MULTI: their next load
# runs the kept commands inside the next EXEC (events twice), drops a write no
# EXEC follows, or refuses to start once an AOF rewrite began a new file
# (README, "Redis with AOF after a crash"; 78_redis_aof_cut). The tool cuts
# before the MULTI. What it did is logged (its exit code in
# REDIS_AOF_REPAIR_RC, the files it truncated counted in REDIS_AOF_REPAIRS).
# When it cannot repair, the server's start decides: valkey-check-aof 9.1.2
# takes its own server's RDB base ("VALKEY" signature) for RESP and calls it
# a format error (valkey-io/valkey#4739), and that server has the fix
# (valkey-io/valkey#4342) and drops the cut block itself.
redis_aof_repair() {
	local m tool out n rc=0
	m=$(ls "$T/redis/appendonlydir/"*.manifest 2>/dev/null | head -n 1) || true
	[ -n "$m" ] || return 0
	tool=${REDIS_SERVER%-server}-check-aof
	out=$(echo y | _redis_run "$tool" --fix "$m" 2>&1) || rc=$?
	REDIS_AOF_REPAIR_RC=$rc
	n=$(grep -c 'Successfully truncated' <<<"$out") || true
	REDIS_AOF_REPAIRS=$((${REDIS_AOF_REPAIRS:-0} + n))
	log "$tool --fix (exit $rc): $(grep -E 'diff=[1-9]|Successfully|Failed|error|All AOF' <<<"$out" |
		sed 's/^AOF analyzed: //' | tr '\n' ' ' | cut -c1-400)"
}

# redis_kill9 [redis-server args]: SIGKILL the server, repair its AOF
# (redis_aof_repair) and start it again with the args.
redis_kill9() {
	kill -9 "$REDIS_PID" 2>/dev/null || true
	wait_for redis_down 60 || fail "redis-server survives SIGKILL"
	REDIS_PID=
	redis_aof_repair
	redis_start "$@"
}

# ---------------------------------------------------------------------------
# The relay
# ---------------------------------------------------------------------------

# The HTTP endpoint is off unless a test asks for it (a later --http-addr
# wins): parallel tests would otherwise all want the default :9187.
# RELAY_PLUGIN=pgoutput: every relay run and slot_create use pgoutput (wal2json when unset).
_relay_args() {
	RELAY_ARGS=(--pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --log-level "$RELAY_LOG_LEVEL"
		--http-addr "" ${RELAY_PLUGIN:+--plugin "$RELAY_PLUGIN"})
}

_next_log() {
	RELAY_N=$((RELAY_N + 1))
	RELAY_LOG=$T/relay.$RELAY_N.log
}

# relay_start ARGS...: start the relay in the background (pid in $RELAY_PID,
# log in $RELAY_LOG).
relay_start() {
	_relay_args
	_next_log
	"$RELAY_BIN" "${RELAY_ARGS[@]}" "$@" >"$RELAY_LOG" 2>&1 &
	RELAY_PID=$!
	RELAY_BG_N=$RELAY_N
	echo "$RELAY_PID" >>"$T/relay.pids"
	log "relay #$RELAY_N started (pid $RELAY_PID): $*"
}

# relay_alive: succeeds while the background relay runs.
relay_alive() { [ -n "$RELAY_PID" ] && pid_alive "$RELAY_PID"; }

# relay_wait TIMEOUT_S: wait for the background relay to exit; its exit code is
# left in $RELAY_RC. Returns 1 (relay still running) on timeout.
relay_wait() {
	local t=${1:-15}
	wait_for '! relay_alive' "$t" || return 1
	RELAY_RC=0
	wait "$RELAY_PID" 2>/dev/null || RELAY_RC=$?
	RELAY_PID=
	return 0
}

# relay_stop [TIMEOUT_S]: SIGTERM the background relay and wait (default 15 s,
# then SIGKILL and fail). The relay's exit code is left in $RELAY_RC; returns 0.
relay_stop() {
	[ -n "$RELAY_PID" ] || return 0
	kill -TERM "$RELAY_PID" 2>/dev/null || true
	if ! relay_wait "${1:-15}"; then
		kill -9 "$RELAY_PID" 2>/dev/null || true
		fail "relay pid $RELAY_PID did not exit within ${1:-15} s of SIGTERM"
	fi
	log "relay #$RELAY_BG_N stopped, exit code $RELAY_RC"
}

# relay_kill9: SIGKILL the background relay.
relay_kill9() {
	[ -n "$RELAY_PID" ] || return 0
	kill -9 "$RELAY_PID" 2>/dev/null || true
	relay_wait 10 || fail "relay pid $RELAY_PID survives SIGKILL"
	log "relay #$RELAY_BG_N killed with SIGKILL (exit code $RELAY_RC)"
}

# relay_run ARGS...: run the relay in the foreground, bounded by
# $RELAY_TIMEOUT s. Returns its exit code (124 = timed out), also in $RELAY_RC;
# under the ERR trap call it as `relay_run ... || true` and check $RELAY_RC.
relay_run() {
	_relay_args
	_next_log
	RELAY_RC=0
	timeout -k 5 "$RELAY_TIMEOUT" "$RELAY_BIN" "${RELAY_ARGS[@]}" "$@" >"$RELAY_LOG" 2>&1 || RELAY_RC=$?
	log "relay #$RELAY_N ($*) exit code $RELAY_RC"
	return "$RELAY_RC"
}

# relay_run_until LSN ARGS...: relay_run with --endpos LSN.
relay_run_until() {
	local lsn=$1
	shift
	relay_run --endpos "$lsn" "$@"
}

# relay_drain ARGS...: relay_run_until the current LSN and fail unless it exits 0.
relay_drain() {
	local lsn
	lsn=$(current_lsn)
	relay_run_until "$lsn" "$@" || true
	[ "$RELAY_RC" = 0 ] || fail "relay --endpos $lsn exited with $RELAY_RC (124 = timeout after ${RELAY_TIMEOUT}s)"
	ok "relay drained to $lsn"
}

# final_sum LOG FIELD: FIELD=N of the relay's final line ("stopped (...): ..."), summed
# over the final lines in LOG (one per relay run).
final_sum() {
	grep -o "stopped (.*" "$1" | grep -o " $2=[0-9]*" | cut -d= -f2 | awk '{ s += $1 } END { print s + 0 }'
}

# relay_peak_rss_kb [LOG]: the N of the last "peak_rss_kb=N" in the log.
relay_peak_rss_kb() {
	grep -o 'peak_rss_kb=[0-9]*' "${1:-$RELAY_LOG}" | tail -n 1 | cut -d= -f2
}

# relay_sanitized: succeeds when RELAY_BIN was built with ASan.
relay_sanitized() { grep -q __asan_init "$RELAY_BIN" 2>/dev/null; }

# ---------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------

# rx ARGS...: tests/integration/rx.py against the test Redis (see rx.py).
rx() { $RX "$REDIS_SOCK" "$@"; }

# stream_ids_all [PATTERN]: the id field of every entry of every event stream
# (default outbox:*, excluding the dead-letter stream), one per line.
stream_ids_all() { rx ids "${1:-outbox:*}" outbox:dead-letter; }

# xlen STREAM
xlen() { redis_cli XLEN "$1"; }

# assert_exactly_once EXPECTED_IDS_FILE [PATTERN]: every id in the file appears
# exactly once across the event streams, and nothing else appears.
assert_exactly_once() {
	local got=$T/got.$RANDOM
	stream_ids_all "${2:-outbox:*}" >"$got" || fail "could not read streams"
	ids_exactly_once "$1" "$got"
}

# assert_whole_tx_confirmed ROWS CONFIRMED MESSAGE: after a stop signal, every
# transaction whose ROWS entries all reached outbox:order/customer/invoice has
# its commit LSN (_lsn) <= CONFIRMED, except the newest: the relay stops
# reading WAL at the signal, so that one may be whole in Redis (rows go out
# before their commit arrives) without its commit having been received.
assert_whole_tx_confirmed() {
	local last t
	for t in order customer invoice; do rx fields "outbox:$t" _xid _lsn; done >"$T/meta"
	last=$(python3 - "$T/meta" "$1" <<'PY'
import collections, sys
n, lsn = collections.Counter(), {}
for line in open(sys.argv[1]):
    xid, l = line.rstrip("\n").split("\t")
    n[xid] += 1
    lsn[xid] = l
def key(l):
    hi, lo = l.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
done = sorted((lsn[x] for x in n if n[x] == int(sys.argv[2])), key=key)
print(done[-2] if len(done) >= 2 else "")
PY
)
	[ -n "$last" ] || return 0
	assert_lsn_ge "$2" "$last" "$3"
}

# assert_stream_ids STREAM EXPECTED_FILE: the id fields of STREAM, in stream
# order, are exactly the lines of EXPECTED_FILE.
assert_stream_ids() {
	local got=$T/ids.$RANDOM n
	rx fields "$1" id >"$got" || fail "could not read $1"
	n=$(wc -l <"$2")
	if ! cmp -s "$2" "$got"; then
		fail "ids of $1 differ from the expected order ($n expected, $(wc -l <"$got") found); first differences:
$(diff "$2" "$got" | head_n 12)"
	fi
	ok "$1 holds the $n expected ids in order"
}

# assert_field_names STREAM NAME...: every entry of STREAM has exactly these
# fields, in this order.
assert_field_names() {
	local s=$1 bad
	shift
	bad=$(rx entries "$s" | python3 -c '
import json, sys
want = sys.argv[1:]
n = 0
for line in sys.stdin:
    e = json.loads(line)
    got = [k for k, _ in e["fields"]]
    if got != want:
        print("entry %s has fields %s" % (e["eid"], got))
        n += 1
        if n >= 3:
            break
' "$@") || fail "could not read $s"
	[ -z "$bad" ] || fail "$s: expected fields [$*]; $bad"
	ok "every entry of $s has fields $*"
}

# sum_xlen PATTERN: total entries over the streams matching PATTERN (default
# outbox:*), not counting the dead-letter stream.
sum_xlen() {
	local k total=0
	for k in $(rx streams "${1:-outbox:*}"); do
		[ "$k" = outbox:dead-letter ] && continue
		total=$((total + $(xlen "$k")))
	done
	echo "$total"
}

# xlen_sum STREAM...: total entries of the given streams, one redis-cli call.
xlen_sum() {
	printf 'XLEN %s\n' "$@" | redis_cli | awk '{ s += $1 } END { print s + 0 }'
}

# wait_entries N TIMEOUT_S STREAM...: poll (every 20 ms) until the streams hold
# at least N entries in total. Returns 1 on timeout or when the background
# relay has exited. Used to stop the relay in the middle of a drain however
# fast it is.
wait_entries() {
	local n=$1 timeout=$2 deadline
	shift 2
	_now
	deadline=$((_NOW_NS + timeout * 1000000000))
	while [ "$(xlen_sum "$@")" -lt "$n" ]; do
		relay_alive || return 1
		_now
		[ "$_NOW_NS" -lt "$deadline" ] || return 1
		sleep 0.02
	done
}

# ---------------------------------------------------------------------------
# throwaway certificates (openssl; EC P-256, valid for 2 days)
# ---------------------------------------------------------------------------

# tls_ca DIR NAME "CN": a self-signed CA, DIR/NAME.crt and DIR/NAME.key.
tls_ca() {
	mkdir -p "$1"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=$3" -keyout "$1/$2.key" -out "$1/$2.crt" 2>"$1/openssl.log" ||
		fail "openssl: CA $2: $(cat "$1/openssl.log")"
	chmod 644 "$1/$2.crt"
}

# tls_cert DIR NAME CA "CN" SAN USAGE: DIR/NAME.crt (+ .key, mode 600) for
# subjectAltName SAN (e.g. "DNS:localhost,IP:127.0.0.1"), extendedKeyUsage
# USAGE (serverAuth or clientAuth), signed by DIR/CA; checked with openssl verify.
tls_cert() {
	local d=$1 n=$2 ca=$3
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$4" \
		-keyout "$d/$n.key" -out "$d/$n.csr" 2>"$d/openssl.log" || fail "openssl: CSR $n: $(cat "$d/openssl.log")"
	printf '%s\n' "subjectAltName = $5" "basicConstraints = CA:FALSE" \
		"keyUsage = digitalSignature, keyEncipherment" "extendedKeyUsage = $6" >"$d/$n.ext"
	openssl x509 -req -in "$d/$n.csr" -CA "$d/$ca.crt" -CAkey "$d/$ca.key" -CAcreateserial \
		-days 2 -extfile "$d/$n.ext" -out "$d/$n.crt" 2>"$d/openssl.log" ||
		fail "openssl: signing $n: $(cat "$d/openssl.log")"
	openssl verify -CAfile "$d/$ca.crt" "$d/$n.crt" >/dev/null || fail "$n.crt does not verify against $ca.crt (test bug)"
	chmod 600 "$d/$n.key"
	chmod 644 "$d/$n.crt"
}

# ---------------------------------------------------------------------------
# shared workload of the fault tests: rows alternating between two streams
# ---------------------------------------------------------------------------

# emit_orders_customers FROM TO [TXSIZE]: rows n = FROM..TO, TXSIZE (default 100) rows per transaction.
emit_orders_customers() {
	psql_q "DO \$\$ BEGIN
	  FOR t IN 0..(($2 - $1 + 1) / ${3:-100} - 1) LOOP
	    INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT (ARRAY['order','customer'])[i % 2 + 1], i::text, 'created', jsonb_build_object('n', i)
	      FROM generate_series($1 + t * ${3:-100}, $1 + t * ${3:-100} + ${3:-100} - 1) i;
	    COMMIT;
	  END LOOP;
	END \$\$;"
}

# check_orders_customers_once WHAT: every outbox row exactly once in the streams, and
# outbox:order / outbox:customer each in aggregate_id order.
check_orders_customers_once() {
	psql_q "SELECT id FROM outbox" >"$T/expected"
	assert_exactly_once "$T/expected"
	for t in order customer; do
		psql_q "SELECT id FROM outbox WHERE aggregate_type = '$t' ORDER BY aggregate_id::int" >"$T/order.$t"
		assert_stream_ids "outbox:$t" "$T/order.$t"
	done
	ok "$1"
}

# ===========================================================================
# Redis Cluster and replicas (loopback TCP)
# ===========================================================================
#
# A cluster needs TCP: its nodes talk over the bus port (port + 10000). These
# servers listen on 127.0.0.1 only, on random free ports in 11000-22767 (bus
# ports 21000-32767: both below Linux's default ephemeral range 32768-60999,
# so an outgoing connection cannot grab the port of a node while it is down
# for a restart), so parallel tests do not collide (a node whose port was
# taken between the check and the bind is retried on another port). Node
# PORT lives in $T/rnode.PORT/ (dir, nodes.conf, redis.log, redis.pid); its
# pid goes to $T/redis.pids, so the EXIT trap and the watchdog kill it like
# the unix-socket Redis.
#
#   cluster_start 3 1          3 masters, 1 replica each; sets CLUSTER_PORTS
#                              (masters first), CLUSTER_MASTER_PORTS,
#                              CLUSTER_REPLICA_PORTS, CLUSTER_URL
#   cluster_cli PORT ARGS      redis-cli -c --raw on one node
#   cluster_ids_exactly_once EXPECTED_IDS_FILE [PATTERN]
#   cluster_move_slot SLOT FROM TO [PAUSE_S]   move one slot and its keys (ASK, then MOVED)
#   replica_pair_start         PRIMARY_PORT + REPLICA_PORT (REPLICAOF), no cluster

CLUSTER_PORTS=
CLUSTER_MASTER_PORTS=
CLUSTER_REPLICA_PORTS=
CLUSTER_URL=
CLUSTER_NODE_ARGS=()
PRIMARY_PORT=
REPLICA_PORT=

# tcp_port_free PORT: nothing is bound to 127.0.0.1:PORT (a bind test).
tcp_port_free() {
	python3 -c 'import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)' "$1"
}

# free_tcp_port [bus]: a random free port in 11000-22767; with "bus", port +
# 10000 (the cluster bus) is free too.
free_tcp_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((11000 + RANDOM % 11768))
		tcp_port_free "$p" || continue
		[ "${1:-}" != bus ] || tcp_port_free $((p + 10000)) || continue
		echo "$p"
		return 0
	done
	fail "no free TCP port (pair) found in 11000-22767"
}

# rcli PORT ARGS...: redis-cli --raw on 127.0.0.1:PORT (no redirections).
rcli() {
	local p=$1
	shift
	redis-cli -h 127.0.0.1 -p "$p" --raw "$@"
}

# cluster_cli PORT ARGS...: redis-cli -c --raw on 127.0.0.1:PORT (follows MOVED/ASK).
cluster_cli() {
	local p=$1
	shift
	redis-cli -c -h 127.0.0.1 -p "$p" --raw "$@"
}

# rnode_pid PORT: pid of the node on PORT (from its pidfile; empty if none).
rnode_pid() { cat "$T/rnode.$1/redis.pid" 2>/dev/null || true; }

# rnode_up PORT: the node answers PING.
rnode_up() { [ "$(rcli "$1" ping 2>/dev/null)" = PONG ]; }

# _rnode_launch PORT ARGS...: start redis-server on 127.0.0.1:PORT with dir
# $T/rnode.PORT and ARGS; returns 1 when it does not come up (port taken).
# The args are saved so rnode_start PORT can start the node again.
_rnode_launch() {
	local p=$1 d=$T/rnode.$1
	shift
	mkdir -p "$d"
	rm -f "$d/redis.pid"
	: >"$d/args"
	[ $# -eq 0 ] || printf '%s\0' "$@" >"$d/args" # printf with no args would write one ""
	redis_server --bind 127.0.0.1 --port "$p" --save '' --appendonly no --repl-diskless-sync-delay 0 --dir "$d" \
		--daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" "$@" ||
		return 1
	_daemon_up "$d/redis.pid" "rnode_up $p" || {
		log "redis-server on port $p did not start: $(grep -m1 -iE 'error|in use' "$d/redis.log" 2>/dev/null || true)" >&2
		return 1
	}
}

# _daemon_up PIDFILE CHECK: a daemonized redis-server (or Sentinel) wrote
# PIDFILE within 5 s (its pid is then recorded for the cleanup) and CHECK
# succeeds within 10 s; else it is killed and 1 returned.
_daemon_up() {
	local pid
	wait_for "[ -s '$1' ]" 5 || return 1
	pid=$(cat "$1")
	echo "$pid" >>"$T/redis.pids"
	wait_for "$2" 10 || {
		kill -9 "$pid" 2>/dev/null || true
		return 1
	}
}

# rnode_new ARGS...: start a node on a fresh free port (bus port free too);
# prints the port. Retries on another port when the chosen one was taken.
rnode_new() {
	local p
	for _ in 1 2 3 4 5; do
		p=$(free_tcp_port bus)
		if _rnode_launch "$p" "$@"; then
			echo "$p"
			return 0
		fi
	done
	fail "could not start redis-server on a free port (5 attempts; see $T/rnode.*/redis.log)"
}

# rnode_start PORT: start the node on PORT again, with the args it had
# (cluster nodes keep their nodes.conf, so they rejoin).
rnode_start() {
	local a=()
	mapfile -d '' a <"$T/rnode.$1/args"
	_rnode_launch "$1" "${a[@]}" || fail "redis-server on port $1 does not start again"
	log "redis node $1 started again (pid $(rnode_pid "$1"))"
}

# _rnode_forget PID: drop an exited node's pid from $T/redis.pids, so the
# cleanup never signals a process that reuses the number.
_rnode_forget() { sed -i "/^$1\$/d" "$T/redis.pids"; }

# rnode_stop PORT: SHUTDOWN NOSAVE and wait for the process to exit.
rnode_stop() {
	local p=$1 pid
	pid=$(rnode_pid "$p")
	rcli "$p" shutdown nosave >/dev/null 2>&1 || true
	if [ -n "$pid" ] && ! wait_for "! pid_alive $pid" 10; then
		kill -9 "$pid" 2>/dev/null || true
		wait_for "! pid_alive $pid" 5 || fail "redis-server pid $pid (port $p) does not exit"
	fi
	[ -z "$pid" ] || _rnode_forget "$pid"
}

# rnode_kill9 PORT: SIGKILL the node on PORT and wait until it is gone.
rnode_kill9() {
	local p=$1 pid
	pid=$(rnode_pid "$p")
	[ -n "$pid" ] || fail "no pid for the redis node on port $p"
	kill -9 "$pid" 2>/dev/null || true
	wait_for "! pid_alive $pid" 10 || fail "redis-server pid $pid (port $p) survives SIGKILL"
	rm -f "$T/rnode.$p/redis.pid"
	_rnode_forget "$pid"
	log "redis node $p (pid $pid) killed with SIGKILL"
}

# rnode_log_tail PORT [N]: the last N (default 20) lines of the node's log.
rnode_log_tail() { tail -n "${2:-20}" "$T/rnode.$1/redis.log" 2>/dev/null | cut -c1-300; }

# cluster_live_port: the first node of CLUSTER_PORTS that answers PING.
cluster_live_port() {
	local p
	for p in $CLUSTER_PORTS; do
		if rnode_up "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# cluster_nodes [PORT]: CLUSTER NODES as seen by PORT (default: a live node).
# shellcheck disable=SC2120 # PORT is optional
cluster_nodes() { rcli "${1:-$(cluster_live_port)}" cluster nodes; }

# _all_nodes_see_replicas N PORT...: every node's CLUSTER NODES lists N replicas
# (gossip reaches the nodes one by one).
_all_nodes_see_replicas() {
	local want=$1 p
	shift
	for p in "$@"; do
		# flags are field 3: "slave", or "myself,slave" on a replica's own line
		[ "$(cluster_nodes "$p" | awk '$3 ~ /slave/' | wc -l)" -ge "$want" ] || return 1
	done
}

# cluster_masters: ports of the current masters that own slots and are not
# failed, as seen by a live node; sorted.
cluster_masters() {
	cluster_nodes | awk '$3 ~ /master/ && $3 !~ /fail/ && NF >= 9 { split($2, a, "[:@]"); print a[2] }' | sort -n
}

# cluster_node_id PORT: the node's id.
cluster_node_id() { rcli "$1" cluster myid; }

# cluster_key_port KEY: port of the master owning KEY's slot.
cluster_key_port() {
	local slot
	slot=$(rcli "$(cluster_live_port)" cluster keyslot "$1")
	cluster_nodes | awk -v s="$slot" '$3 ~ /master/ && $3 !~ /fail/ {
		split($2, a, "[:@]")
		for (i = 9; i <= NF; i++) {
			if ($i ~ /^\[/) continue
			n = split($i, r, "-")
			lo = r[1]; hi = (n == 2 ? r[2] : r[1])
			if (s >= lo + 0 && s <= hi + 0) { print a[2]; exit }
		}
	}'
}

# cluster_move_slot SLOT FROM_PORT TO_PORT [PAUSE_S]: move one hash slot and
# its keys between masters by hand, as redis-cli --cluster reshard does for
# each slot: SETSLOT IMPORTING on the target, MIGRATING on the source, MIGRATE
# the keys in batches until the source holds none, wait PAUSE_S seconds (the
# slot is then served through ASK redirections), then SETSLOT NODE on every
# master (clients get MOVED from then on).
cluster_move_slot() {
	local slot=$1 from=$2 to=$3 pause=${4:-0} fid tid moving out p
	fid=$(cluster_node_id "$from")
	tid=$(cluster_node_id "$to")
	out=$(rcli "$to" CLUSTER SETSLOT "$slot" IMPORTING "$fid")
	[ "$out" = OK ] || fail "CLUSTER SETSLOT $slot IMPORTING on $to: $out"
	out=$(rcli "$from" CLUSTER SETSLOT "$slot" MIGRATING "$tid")
	[ "$out" = OK ] || fail "CLUSTER SETSLOT $slot MIGRATING on $from: $out"
	while :; do
		# (--raw prints an empty array as one empty line)
		mapfile -t moving < <(rcli "$from" CLUSTER GETKEYSINSLOT "$slot" 100 | sed '/^$/d')
		[ "${#moving[@]}" -gt 0 ] || break
		out=$(rcli "$from" MIGRATE 127.0.0.1 "$to" "" 0 10000 KEYS "${moving[@]}")
		[ "$out" = OK ] || fail "MIGRATE of slot $slot from $from to $to: $out"
	done
	sleep "$pause"
	for p in "$to" "$from" $(cluster_masters); do
		out=$(rcli "$p" CLUSTER SETSLOT "$slot" NODE "$tid")
		[ "$out" = OK ] || fail "CLUSTER SETSLOT $slot NODE on $p: $out"
	done
	log "slot $slot moved from master $from to master $to"
}

# cluster_ok [PORTS...]: every node (default: CLUSTER_PORTS) reports
# cluster_state:ok, and redis-cli --cluster check finds all slots covered and
# the nodes agreeing (no open slots).
cluster_ok() {
	local p ports=${*:-$CLUSTER_PORTS}
	for p in $ports; do
		rcli "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
	p=${ports%% *}
	redis-cli --cluster check "127.0.0.1:$p" >"$T/cluster-check.log" 2>&1 || return 1
	grep -q 'All 16384 slots covered' "$T/cluster-check.log" &&
		! grep -q '\[ERR\]\|\[WARNING\]' "$T/cluster-check.log"
}

# replicas_synced PORTS...: every given replica has master_link_status:up.
replicas_synced() {
	local p
	for p in "$@"; do
		rcli "$p" info replication 2>/dev/null | grep -q '^master_link_status:up' || return 1
	done
}

# cluster_wait_ok [TIMEOUT_S]: wait for cluster_ok on the nodes that are up
# and for every replica to be in sync with its master.
cluster_wait_ok() {
	local t=${1:-30} live p reps
	live=
	for p in $CLUSTER_PORTS; do
		rnode_up "$p" && live="$live $p"
	done
	wait_for "cluster_ok $live" "$t" || {
		cat "$T/cluster-check.log" >&2 2>/dev/null || true
		return 1
	}
	reps=$(cluster_nodes | awk '$3 ~ /slave/ && $3 !~ /fail/ { split($2, a, "[:@]"); printf "%s ", a[2] }')
	# shellcheck disable=SC2086 # a list of ports
	wait_for "replicas_synced $reps" "$t"
}

# cluster_start MASTERS [REPLICAS_PER_MASTER [EXTRA redis-server ARGS...]]:
# start MASTERS * (1 + REPLICAS) cluster nodes, create the cluster with
# redis-cli --cluster create, wait until every node reports cluster_state:ok
# and the replicas are in sync. Exports CLUSTER_PORTS (masters first, then
# replicas), CLUSTER_MASTER_PORTS, CLUSTER_REPLICA_PORTS and CLUSTER_URL
# (redis-cluster://127.0.0.1:P1,127.0.0.1:P2, two master seeds).
cluster_start() {
	local masters=$1 replicas=${2:-0} t0 n p ports=() addrs=() m
	_now
	t0=$_NOW_NS
	shift 2 || shift $#
	# nodes.conf is relative to --dir: $T/rnode.PORT/nodes.conf.
	CLUSTER_NODE_ARGS=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 "$@")
	n=$((masters * (1 + replicas)))
	for _ in $(seq 1 "$n"); do
		p=$(rnode_new "${CLUSTER_NODE_ARGS[@]}")
		ports+=("$p")
		addrs+=("127.0.0.1:$p")
	done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes \
		>"$T/cluster-create.log" 2>&1 || {
		cat "$T/cluster-create.log" >&2
		fail "redis-cli --cluster create failed"
	}
	CLUSTER_PORTS="${ports[*]}"
	cluster_wait_ok 60 || fail "cluster not ok 60 s after creation: $(rcli "${ports[0]}" cluster info | head_n 1)"
	# "cluster create" assigns replicas with CLUSTER REPLICATE; every node
	# learns of it by gossip, a moment later on a busy machine.
	if [ "$replicas" -gt 0 ]; then
		wait_for "_all_nodes_see_replicas $((masters * replicas)) ${ports[*]}" 30 "replicas to attach" ||
			fail "replicas not attached 30 s after creation: $(cluster_nodes | tr '\n' ';')"
	fi
	CLUSTER_MASTER_PORTS=$(cluster_masters | tr '\n' ' ' | sed 's/ $//')
	CLUSTER_REPLICA_PORTS=
	for p in "${ports[@]}"; do
		case " $CLUSTER_MASTER_PORTS " in
		*" $p "*) ;;
		*) CLUSTER_REPLICA_PORTS="${CLUSTER_REPLICA_PORTS:+$CLUSTER_REPLICA_PORTS }$p" ;;
		esac
	done
	CLUSTER_PORTS="$CLUSTER_MASTER_PORTS${CLUSTER_REPLICA_PORTS:+ $CLUSTER_REPLICA_PORTS}"
	read -ra m <<<"$CLUSTER_MASTER_PORTS"
	[ "${#m[@]}" = "$masters" ] || fail "cluster has ${#m[@]} masters, wanted $masters: $(cluster_nodes | tr '\n' ';')"
	CLUSTER_URL="redis-cluster://127.0.0.1:${m[0]},127.0.0.1:${m[1]:-${m[0]}}"
	export CLUSTER_PORTS CLUSTER_MASTER_PORTS CLUSTER_REPLICA_PORTS CLUSTER_URL
	log "redis cluster started in $(_ms_since "$t0") ms: masters $CLUSTER_MASTER_PORTS${CLUSTER_REPLICA_PORTS:+, replicas $CLUSTER_REPLICA_PORTS}"
}

# cluster_stop: SHUTDOWN NOSAVE every node.
cluster_stop() {
	local p
	for p in $CLUSTER_PORTS; do
		rnode_stop "$p"
	done
	log "redis cluster stopped"
}

# cluster_ids [PATTERN]: the id field of every entry of every stream matching
# PATTERN (default outbox:*, dead-letter stream excluded) on every current
# master (SCAN TYPE stream + XRANGE on each), one per line.
cluster_ids() {
	local p
	for p in $(cluster_masters); do
		$RX "127.0.0.1:$p" ids "${1:-outbox:*}" outbox:dead-letter || return 1
	done
}

# cluster_streams [PATTERN]: "PORT STREAM" for every stream on every master.
cluster_streams() {
	local p k
	for p in $(cluster_masters); do
		for k in $($RX "127.0.0.1:$p" streams "${1:-outbox:*}"); do
			echo "$p $k"
		done
	done
}

# cluster_rx ARGS...: rx.py against the cluster (a MOVED reply is followed),
# e.g. cluster_rx fields outbox:x id.
cluster_rx() { $RX "127.0.0.1:$(cluster_live_port)" "$@"; }

# ids_exactly_once EXPECTED_IDS_FILE GOT_IDS_FILE [WHERE]: every id of the
# first file appears exactly once in the second, and nothing else does.
ids_exactly_once() {
	local exp=$1 got=$2 where=${3:+ ($3)} n_exp n_got dups missing extra
	n_exp=$(sort -u "$exp" | wc -l)
	[ "$n_exp" = "$(wc -l <"$exp")" ] || fail "expected-id file $exp has duplicates (test bug)"
	n_got=$(wc -l <"$got")
	dups=$(sort "$got" | uniq -d)
	missing=$(comm -23 <(sort -u "$exp") <(sort -u "$got"))
	extra=$(comm -13 <(sort -u "$exp") <(sort -u "$got"))
	if [ -n "$dups" ] || [ -n "$missing" ] || [ -n "$extra" ]; then
		fail "exactly-once violated$where: expected $n_exp ids, streams hold $n_got entries;" \
			"$(printf '%s\n' "$dups" | grep -c . || true) duplicated (e.g. $(printf '%s' "$dups" | head_n 3 | tr '\n' ' '))," \
			"$(printf '%s\n' "$missing" | grep -c . || true) missing (e.g. $(printf '%s' "$missing" | head_n 3 | tr '\n' ' '))," \
			"$(printf '%s\n' "$extra" | grep -c . || true) unexpected (e.g. $(printf '%s' "$extra" | head_n 3 | tr '\n' ' '))"
	fi
	ok "exactly once$where: all $n_exp ids appear once, nothing else ($n_got entries)"
}

# cluster_ids_exactly_once EXPECTED_IDS_FILE [PATTERN]: every id in the file
# appears exactly once across the streams of all masters, nothing else.
cluster_ids_exactly_once() {
	local got=$T/got.$RANDOM
	cluster_ids "${2:-outbox:*}" >"$got" || fail "could not read the cluster's streams"
	ids_exactly_once "$1" "$got" "cluster, masters $(cluster_masters | tr '\n' ' ' | sed 's/ $//')"
}

# cluster_assert_order EXPECTED_TSV [PATTERN]: EXPECTED_TSV holds lines
# "STREAM<tab>ID" in the order each stream must hold its ids; the streams
# matching PATTERN (default outbox:*) on all masters hold exactly those ids in
# that order, and no other stream matches.
cluster_assert_order() {
	local got=$T/sids.$RANDOM bad p
	for p in $(cluster_masters); do
		$RX "127.0.0.1:$p" sids "${2:-outbox:*}" outbox:dead-letter || return 1
	done >"$got" || fail "could not read the cluster's streams"
	bad=$(python3 - "$1" "$got" <<-'PY'
		import sys
		def load(f):
		    d = {}
		    for line in open(f):
		        s, i = line.rstrip("\n").split("\t")
		        d.setdefault(s, []).append(i)
		    return d
		exp, got = load(sys.argv[1]), load(sys.argv[2])
		bad = []
		for s in sorted(set(exp) | set(got)):
		    e, g = exp.get(s, []), got.get(s, [])
		    if e != g:
		        k = next((j for j in range(min(len(e), len(g))) if e[j] != g[j]), min(len(e), len(g)))
		        bad.append("%s: %d ids expected, %d found, first difference at entry %d" % (s, len(e), len(g), k))
		print("; ".join(bad[:5]))
	PY
	) || fail "could not compare stream orders"
	[ -z "$bad" ] || fail "stream order differs from the expected order: $bad"
	ok "$(cut -f1 "$1" | sort -u | wc -l) streams hold their $(wc -l <"$1") ids in the expected order"
}

# replica_pair_start [EXTRA redis-server ARGS...]: a primary and one replica
# (REPLICAOF) on loopback TCP ports, both with ARGS; waits until the replica
# is in sync. Sets PRIMARY_PORT and REPLICA_PORT.
replica_pair_start() {
	local t0
	_now
	t0=$_NOW_NS
	PRIMARY_PORT=$(rnode_new "$@")
	REPLICA_PORT=$(rnode_new "$@" --replicaof 127.0.0.1 "$PRIMARY_PORT")
	replica_wait_synced 30 || fail "replica $REPLICA_PORT not in sync with $PRIMARY_PORT after 30 s"
	export PRIMARY_PORT REPLICA_PORT
	log "redis primary $PRIMARY_PORT (pid $(rnode_pid "$PRIMARY_PORT")) + replica $REPLICA_PORT (pid $(rnode_pid "$REPLICA_PORT")) started in $(_ms_since "$t0") ms"
}

# primary_replicas: the primary's connected_slaves count.
primary_replicas() { rcli "$PRIMARY_PORT" info replication | tr -d '\r' | sed -n 's/^connected_slaves://p'; }

# replica_wait_synced [TIMEOUT_S]: the replica's link is up and the primary
# counts it.
replica_wait_synced() {
	wait_for "replicas_synced $REPLICA_PORT && [ \"\$(primary_replicas)\" = 1 ]" "${1:-30}"
}

# replica_stop: SHUTDOWN NOSAVE the replica (its data is gone; it resyncs).
replica_stop() {
	rnode_stop "$REPLICA_PORT"
	log "replica $REPLICA_PORT shut down"
}

# replica_start: start the replica again on its port; waits for the resync.
replica_start() {
	rnode_start "$REPLICA_PORT"
	replica_wait_synced 30 || fail "replica $REPLICA_PORT not in sync 30 s after its restart"
	log "replica $REPLICA_PORT in sync again"
}

# replica_pause / replica_resume: SIGSTOP / SIGCONT the replica (connected,
# but acknowledges nothing meanwhile).
replica_pause() {
	kill -STOP "$(rnode_pid "$REPLICA_PORT")"
	log "replica $REPLICA_PORT paused (SIGSTOP)"
}
replica_resume() {
	kill -CONT "$(rnode_pid "$REPLICA_PORT")"
	log "replica $REPLICA_PORT resumed (SIGCONT)"
}

# ---------------------------------------------------------------------------
# Redis Sentinel: Sentinels on loopback TCP that monitor a replica_pair_start pair
# ---------------------------------------------------------------------------

SENTINEL_NAME=outbox-master
SENTINEL_PASSWORD=

# scli PORT ARGS...: redis-cli --raw to the Sentinel on PORT (AUTH with
# $SENTINEL_PASSWORD when set).
scli() {
	local p=$1
	shift
	if [ -n "$SENTINEL_PASSWORD" ]; then
		REDISCLI_AUTH=$SENTINEL_PASSWORD redis-cli -h 127.0.0.1 -p "$p" --raw "$@"
	else
		redis-cli -h 127.0.0.1 -p "$p" --raw "$@"
	fi
}

# _sentinel_launch PORT MASTER_PORT [EXTRA CONFIG LINES...]: start one Sentinel
# (redis-server --sentinel, which rewrites its own config file) in
# $T/sentinel.PORT; returns 1 when it does not come up.
_sentinel_launch() {
	local p=$1 m=$2 d=$T/sentinel.$1 l di
	shift 2
	di=${d#"${REDIS_CHROOT%/}"} # the directory as the server sees it
	mkdir -p "$d"
	rm -f "$d/redis.pid"
	{
		echo "port $p"
		echo "bind 127.0.0.1"
		echo "daemonize yes"
		echo "pidfile $di/redis.pid"
		echo "logfile $di/sentinel.log"
		echo "dir $di"
		echo "sentinel monitor $SENTINEL_NAME 127.0.0.1 $m 2"
		echo "sentinel down-after-milliseconds $SENTINEL_NAME 3000"
		echo "sentinel failover-timeout $SENTINEL_NAME 3000"
		echo "sentinel parallel-syncs $SENTINEL_NAME 1"
		for l in "$@"; do echo "$l"; done
	} >"$d/sentinel.conf"
	redis_server "$d/sentinel.conf" --sentinel || return 1
	_daemon_up "$d/redis.pid" "[ \"\$(scli $p ping 2>/dev/null)\" = PONG ]"
}

# sentinel_field PORT FIELD: FIELD of SENTINEL MASTER $SENTINEL_NAME on PORT.
sentinel_field() {
	scli "$1" SENTINEL MASTER "$SENTINEL_NAME" 2>/dev/null | awk -v f="$2" 'prev == f { print; exit } { prev = $0 }'
}

# sentinel_master_port [PORT]: the master's port as the Sentinel on PORT
# (default: the first) names it.
sentinel_master_port() {
	scli "${1:-${SENTINEL_PORTS%% *}}" SENTINEL get-master-addr-by-name "$SENTINEL_NAME" 2>/dev/null | sed -n 2p
}

# _sentinels_ready N: every Sentinel sees the master up, one replica and the N-1 others.
_sentinels_ready() {
	local p
	for p in $SENTINEL_PORTS; do
		[ "$(sentinel_field "$p" num-slaves)" = 1 ] || return 1
		[ "$(sentinel_field "$p" num-other-sentinels)" = $(($1 - 1)) ] || return 1
		[ "$(sentinel_field "$p" flags)" = master ] || return 1
	done
}

# sentinels_start MASTER_PORT [N [EXTRA CONFIG LINES...]]: N (default 3)
# Sentinels monitoring $SENTINEL_NAME at 127.0.0.1:MASTER_PORT, quorum 2,
# down-after-milliseconds 3000, failover-timeout 3000; waits until each one
# knows the replica and the other Sentinels. Sets SENTINEL_PORTS and
# SENTINEL_ADDRS (127.0.0.1:P1,127.0.0.1:P2,...). With SENTINEL_TLS set each
# Sentinel also gets a tls-port (the TLS settings come in the extra lines):
# SENTINEL_TLS_ADDRS lists those.
sentinels_start() {
	local m=$1 n=${2:-3} p tp ports=() addrs=() tls_addrs=() t0 started
	_now
	t0=$_NOW_NS
	shift 2 || shift $#
	for _ in $(seq 1 "$n"); do
		started=
		for _ in 1 2 3 4 5; do
			p=$(free_tcp_port)
			tp=
			[ -z "${SENTINEL_TLS:-}" ] || tp=$(free_tcp_port)
			if _sentinel_launch "$p" "$m" ${tp:+"tls-port $tp"} "$@"; then
				started=1
				break
			fi
		done
		[ -n "$started" ] || fail "could not start a Sentinel (see $T/sentinel.*/sentinel.log)"
		ports+=("$p")
		addrs+=("127.0.0.1:$p")
		[ -z "$tp" ] || tls_addrs+=("127.0.0.1:$tp")
	done
	SENTINEL_PORTS="${ports[*]}"
	SENTINEL_ADDRS=$(IFS=,; echo "${addrs[*]}")
	SENTINEL_TLS_ADDRS=$(IFS=,; echo "${tls_addrs[*]}")
	export SENTINEL_PORTS SENTINEL_ADDRS SENTINEL_TLS_ADDRS
	wait_for "_sentinels_ready $n" 60 ||
		fail "Sentinels not ready after 60 s: $(for p in "${ports[@]}"; do printf '%s: slaves=%s others=%s flags=%s; ' "$p" "$(sentinel_field "$p" num-slaves)" "$(sentinel_field "$p" num-other-sentinels)" "$(sentinel_field "$p" flags)"; done)"
	log "$n Sentinels ($SENTINEL_PORTS) watch master $m in $(_ms_since "$t0") ms"
}

# sentinels_agree PORT: every Sentinel names 127.0.0.1:PORT as the master.
sentinels_agree() {
	local p
	for p in $SENTINEL_PORTS; do
		[ "$(sentinel_master_port "$p")" = "$1" ] || return 1
	done
}

# sentinels_stop: SHUTDOWN every Sentinel.
sentinels_stop() {
	local p pid
	for p in $SENTINEL_PORTS; do
		pid=$(cat "$T/sentinel.$p/redis.pid" 2>/dev/null || true)
		scli "$p" shutdown >/dev/null 2>&1 || true
		[ -z "$pid" ] || wait_for "! pid_alive $pid" 10 || kill -9 "$pid" 2>/dev/null || true
		[ -z "$pid" ] || _rnode_forget "$pid"
	done
	SENTINEL_PORTS=
}

# http_get PORT PATH: GET http://127.0.0.1:PORT/PATH with bash's /dev/tcp (no
# curl needed); prints the status code, leaves the body in $T/http.body.
http_get() {
	exec 9<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$2" >&9
	cat <&9 >"$T/http.raw"
	exec 9<&-
	sed '1,/^\r$/d' "$T/http.raw" >"$T/http.body"
	awk 'NR == 1 { print $2 }' "$T/http.raw"
}

# metrics_port LOG: the port a relay's log says it serves /metrics on (it was
# started with --http-addr 127.0.0.1:0); waits up to 30 s for the line, empty
# when it never came.
metrics_port() {
	wait_for "grep -q 'serving /metrics' '$1'" 30 "the HTTP endpoint in $1" || return 0
	sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$1" | head -n 1
}

# metric_value PORT NAME: the value of sample NAME in a fresh scrape (its first
# sample; empty when absent).
metric_value() {
	http_get "$1" /metrics >/dev/null
	metric_sample "$2"
}

# redis_calls NAME: Redis's count of calls of command NAME (lower case; INFO
# commandstats, functions' and MULTI's inner calls included; 0 if it never ran).
redis_calls() {
	redis_cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/p" | grep . || echo 0
}

# metric_sample NAME: the value of sample NAME in the last scrape metric_value made.
metric_sample() {
	grep -E "^$1[{ ]" "$T/http.body" | awk '{ print $NF }' | head -n 1
}

# ---------------------------------------------------------------------------
# Tests made of independent cases
# ---------------------------------------------------------------------------

CASES_OK=()
CASES_FAILED=()

# run_case NAME FUNCTION [ARGS...]: run FUNCTION in a subshell with the usual
# -e/ERR behaviour and record the result in CASES_OK / CASES_FAILED instead of
# stopping the test (the test ends with a verdict over all cases). A relay
# the case started and left running (its pid in $T/case.pid) is killed.
run_case() {
	local name=$1 rc
	shift
	log "=== case $name"
	RELAY_N=$(find "$T" -maxdepth 1 -name 'relay.*.log' | wc -l) # the subshell's relays number on from here
	trap - ERR
	set +e
	(
		set -e
		trap '_on_err $? $LINENO "$BASH_COMMAND"' ERR
		"$@"
	)
	rc=$?
	set -e
	trap '_on_err $? $LINENO "$BASH_COMMAND"' ERR
	if [ "$rc" = 0 ]; then
		CASES_OK+=("$name")
		ok "case $name"
	else
		CASES_FAILED+=("$name")
		log "case $name FAILED; last lines of $(basename "$(ls -t "$T"/relay.*.log 2>/dev/null | head_n 1)"):"
		tail -n 8 "$(ls -t "$T"/relay.*.log | head_n 1)" 2>/dev/null | cut -c1-400 >&2 || true
		# The relay of a failed case may still run (stalled): stop it.
		[ -z "$(cat "$T/case.pid" 2>/dev/null)" ] || kill -9 "$(cat "$T/case.pid")" 2>/dev/null || true
	fi
	: >"$T/case.pid"
}
