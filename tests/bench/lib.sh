# tests/bench/lib.sh - sourced by the benchmark scripts (ROOT set).

# bench_relay_bin: a release build of this tree's relay in build-bench/
# (configured on first use); prints the binary's path.
bench_relay_bin() {
	local b=$ROOT/build-bench
	[ -f "$b/build.ninja" ] ||
		meson setup "$b" "$ROOT" -Dbuildtype=release -Dintegration_tests=false >/dev/null
	ninja -C "$b" cmd/outbox-relay/outbox-relay >/dev/null
	echo "$b/cmd/outbox-relay/outbox-relay"
}

# bench_old_relay_bin REF: a release build of the relay at git ref REF in a
# temp dir (the "before" of a comparison); prints the binary's path.
bench_old_relay_bin() {
	local d
	d=$(mktemp -d "${TMPDIR:-/tmp}/relay-old.XXXXXXXX")
	git -C "$ROOT" archive "$1" | tar -x -C "$d"
	meson setup "$d/build" "$d" -Dbuildtype=release -Dintegration_tests=false >/dev/null
	ninja -C "$d/build" cmd/outbox-relay/outbox-relay >/dev/null
	echo "$d/build/cmd/outbox-relay/outbox-relay"
}

# bench_redis_cpu_s: the Redis at $REDIS_SOCK's user + system CPU seconds so
# far (INFO used_cpu_user + used_cpu_sys). Needs the integration harness.
bench_redis_cpu_s() {
	redis_cli INFO cpu | tr -d '\r' |
		awk -F: '$1 == "used_cpu_user" || $1 == "used_cpu_sys" { s += $2 } END { printf "%.6f\n", s }'
}

# bench_outbox_rows N [ID_EXPR]: N outbox rows of stream outbox:bench, 1000
# per transaction; ID_EXPR (SQL over the row number g) sets their ids,
# else the table's default (random UUIDs). Needs the integration harness.
bench_outbox_rows() {
	local idcol= idval=
	[ -z "${2:-}" ] || { idcol="id, " idval="$2, "; }
	psql_q "DO \$\$ BEGIN FOR i IN 0..$((($1 - 1) / 1000)) LOOP
	          INSERT INTO outbox (${idcol}aggregate_type, aggregate_id, event_type, payload)
	          SELECT ${idval}'bench', g::text, 'created', jsonb_build_object('n', g)
	          FROM generate_series(i * 1000 + 1, least($1, i * 1000 + 1000)) g;
	          COMMIT; END LOOP; END \$\$" >/dev/null
}

# bench_paced_rows SECS PER: outbox rows of stream outbox:bench at a steady
# pace, one transaction of PER rows every 100 ms for SECS seconds (random
# UUID ids). Needs the integration harness.
bench_paced_rows() {
	psql_q "DO \$\$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN
	          FOR i IN 1..$(($1 * 10)) LOOP
	            INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	            SELECT 'bench', g::text, 'created', jsonb_build_object('n', g) FROM generate_series(1, $2) g;
	            COMMIT;
	            PERFORM pg_sleep(greatest(0, extract(epoch FROM t0 + i * interval '100 ms' - clock_timestamp())));
	          END LOOP; END \$\$" >/dev/null
}

# bench_streaming WHO SLOT [ARGS...]: an empty Redis (started again), and the
# relay of WHO (old: $OLD_BIN, new: $NEW_BIN) streaming from a new slot SLOT
# with ARGS, caught up. Needs the integration harness.
bench_streaming() {
	local bin=$OLD_BIN
	[ "$1" = new ] && bin=$NEW_BIN
	redis_stop
	rm -rf "$T/redis"
	redis_start
	slot_create "$2"
	RELAY_BIN=$bin relay_start --slot "$2" "${@:3}"
	wait_for "slot_active $2" 30 || fail "relay ($1, slot $2) does not stream"
}

# bench_final_field LOG FIELD: FIELD=N of the relay's final line ("stopped (...): ...").
bench_final_field() {
	grep -o "stopped (.*" "$1" | tail -n 1 | grep -o " $2=[0-9]*" | cut -d= -f2
}

# bench_redis_server ARGS...: redis-server under valgrind --tool=callgrind
# when CG=1 (in the foreground of a background job, which callgrind_control
# reaches; its pidfile still names it), else plain, as lib.sh starts it. A
# script sets redis_server() { bench_redis_server "$@"; } after lib.sh.
# CG_OPTS: more valgrind options, word-split (for example --cache-sim=yes:
# each dump then also counts cache misses, read with callgrind_annotate).
bench_redis_server() {
	if [ "${CG:-0}" = 1 ]; then
		# shellcheck disable=SC2086 # CG_OPTS is a list of options
		valgrind --tool=callgrind ${CG_OPTS:-} --callgrind-out-file="$T/cg.%p" redis-server "$@" --daemonize no \
			>>"$T/valgrind.log" 2>&1 &
	else
		redis-server "$@"
	fi
}

# bench_cg_total NAME: the instructions of the redis-server at $REDIS_PID
# (running under valgrind --tool=callgrind --callgrind-out-file=$T/cg.%p)
# since its counts were last zeroed; the dump is kept as $T/cg-NAME.out.
bench_cg_total() {
	local f
	rm -f "$T/cg.$REDIS_PID".*
	callgrind_control -d "$1" "$REDIS_PID" >/dev/null
	wait_for "ls '$T/cg.$REDIS_PID'.* >/dev/null 2>&1" 60 || fail "callgrind wrote no dump"
	f=$(ls "$T/cg.$REDIS_PID".* | head -n 1)
	wait_for "grep -q '^totals:' '$f'" 120 || fail "callgrind dump $f incomplete"
	cp "$f" "$T/cg-$1.out"
	sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f"
}

# bench_cpu_cap PCT PID: PID (every thread of it) runs with at most PCT % of
# one core, in a CPU cgroup of its own made on first use (BENCH_CG: cgroup v2
# cpu.max, else v1 cpu.cfs_quota_us; period 10 ms). Needs root. So a Redis is
# what bounds a drain, as on a host of its own (bench.sh's REDIS_CPU_QUOTA,
# ceiling_window.sh). Prints why and returns 1 when it cannot.
# bench_cpu_uncap PID: PID back out of that cgroup, uncapped.
# bench_cpu_cap_done: the cgroup removed, once nothing runs in it.
BENCH_CG=
bench_cpu_cap() {
	local root=/sys/fs/cgroup q=$(($1 * 100)) dir
	if [ -z "$BENCH_CG" ]; then
		if [ -f "$root/cgroup.controllers" ] && grep -qw cpu "$root/cgroup.controllers"; then
			grep -qw cpu "$root/cgroup.subtree_control" || echo +cpu >"$root/cgroup.subtree_control" ||
				{ echo "cannot enable the cpu controller in $root/cgroup.subtree_control (run as root)" >&2; return 1; }
			dir=$root/outbox-bench.$$
			mkdir "$dir" && echo "$q 10000" >"$dir/cpu.max"
		elif [ -f "$root/cpu/cpu.cfs_quota_us" ]; then
			dir=$root/cpu/outbox-bench.$$
			mkdir "$dir" && echo 10000 >"$dir/cpu.cfs_period_us" && echo "$q" >"$dir/cpu.cfs_quota_us"
		else
			echo "no CPU cgroup controller here (neither $root/cgroup.controllers with cpu nor $root/cpu)" >&2
			return 1
		fi || { echo "cannot make the cgroup $dir (run as root)" >&2; return 1; }
		BENCH_CG=$dir
	fi
	echo "$2" >"$BENCH_CG/cgroup.procs" || { echo "cannot move pid $2 into $BENCH_CG" >&2; return 1; }
}
bench_cpu_uncap() {
	echo "$1" >"$(dirname "$BENCH_CG")/cgroup.procs"
}
bench_cpu_cap_done() {
	[ -n "$BENCH_CG" ] || return 0
	for _ in $(seq 1 50); do rmdir "$BENCH_CG" 2>/dev/null && break; sleep 0.1; done
	BENCH_CG=
}
