#!/bin/bash
# 52_sentinel_failover: the relay behind Redis Sentinel, with real processes.
# One master, one replica, three Sentinels on loopback (quorum 2,
# down-after-milliseconds 3000, failover-timeout 3000). The relay and the
# consumer connect with redis-sentinel://outbox-relay:@S1,S2,S3#outbox-master
# as the shipped ACL users of deploy/redis/users.acl (defined on both data
# nodes: ACL users are not replicated). Events commit continuously, one per
# transaction, from one psql session. Mid-stream the replication link is cut
# (CLIENT KILL TYPE replica, and the master's default user, which the replica
# connects as, switched off: a network partition of the replica) and the
# master is SIGKILLed 0.5 s later while the relay writes to it; Sentinel promotes
# the replica; the old master comes back and Sentinel makes it a replica.
#  (a) --wait-replicas 1 (Sentinels with requirepass, the relay with
#      --redis-sentinel-password-file): every committed event exactly once on
#      the new master, in commit order, none lost. Then outbox-consume and
#      `outbox-relay status` read through the same Sentinel URL, and the
#      relay's refusals: a wrong Sentinel password, an unknown master name,
#      a master user without +role (exit 5, one line, no password); last, a
#      Sentinel ACL user allowed only SENTINEL get-master-addr-by-name.
#  (b) without WAIT (Sentinels without a password): the same fault. The test
#      prints what was lost (committed before the slot's confirmed position,
#      so acknowledged by the old master and confirmed to PostgreSQL, but
#      missing on the new master) and does not fail on it; nothing is
#      duplicated. When the relay finds the new master behind what it had
#      acknowledged it stops (exit 7); then the way back that line names
#      (republish from the outbox table, from before the failover, then a
#      restart) must end with every event exactly once, in order. Otherwise
#      it resumed by itself.
#  (c) a planned failover (SENTINEL FAILOVER) while the relay streams with
#      --wait-replicas 1: it follows the master, exactly once, in order.
#  (d) a stale fourth Sentinel, listed first, names the replica: the relay
#      and outbox-consume see ROLE "slave", ask the others, and deliver.
# Modes (a) and (b) print one line: events, lost, duplicated, time to resume
# (s from the SIGKILL to the first event the relay published on the new master).
RELAY_TIMEOUT=${RELAY_TIMEOUT:-60}
. "$(dirname "$0")/lib.sh"
command -v redis-sentinel >/dev/null || [ -n "$REDIS_CHROOT" ] ||
	skip "no redis-sentinel (Debian package redis-sentinel; deploy/install-deps.sh installs it)"
ROOT=$(cd "$TESTS_DIR/.." && pwd)
ACL_FILE=$ROOT/deploy/redis/users.acl
need_consume_bin
setup_tmp
pg_start
load_schema

secret() { od -An -tx1 -N12 /dev/urandom | tr -d ' \n'; }
sha256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
relaypw=$(secret)
conspw=$(secret)
sentpw=$(secret)
printf '%s\n' "$relaypw" >"$T/relay-password"
printf '%s\n' "$conspw" >"$T/consume-password"
printf '%s\n' "$sentpw" >"$T/sentinel-password"
chmod 600 "$T/relay-password" "$T/consume-password" "$T/sentinel-password"
sed -e "s/#RELAY_PASSWORD_SHA256/#$(sha256 "$relaypw")/" \
	-e "s/#CONSUMER_PASSWORD_SHA256/#$(sha256 "$conspw")/" \
	-e "s/#ADMIN_PASSWORD_SHA256/#$(sha256 "$(secret)")/" "$ACL_FILE" >"$T/users.acl"

# acl_users PORT: the shipped outbox-relay and outbox-consume lines as ACL
# SETUSER on PORT (the default user stays on for Sentinel and replication).
acl_users() {
	local -a words
	local u
	for u in outbox-relay outbox-consume; do
		read -r -a words < <(grep "^user $u " "$T/users.acl")
		assert_eq OK "$(rcli "$1" ACL SETUSER "${words[@]:1}")" "ACL SETUSER $u on $1 (from users.acl)"
	done
}

# emitter_start TAG N0: one psql session commits one event per statement
# (autocommit), about 100 per second, payload n = N0, N0+1, ..., until
# $T/stop.TAG exists. The ids go to $T/emitted.TAG in commit order.
emitter_start() {
	local tag=$1 n0=$2
	rm -f "$T/stop.$tag"
	(
		i=$n0
		while [ ! -f "$T/stop.$tag" ]; do
			echo "SELECT outbox_emit('order', 'agg-$i', 'created', jsonb_build_object('n', $i));"
			i=$((i + 1))
			sleep 0.01
		done
	) | psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$T" -p "$PGPORT" -U postgres -d postgres \
		>"$T/emitted.$tag" 2>"$T/emitter.$tag.log" &
	EMITTER_PID=$!
}
emitter_stop() {
	touch "$T/stop.$1"
	wait "$EMITTER_PID" || fail "the emitter failed: $(tail -n 3 "$T/emitter.$1.log")"
	grep -cE '^[0-9a-f-]{36}$' "$T/emitted.$1" >/dev/null || fail "the emitter committed nothing"
}

# xlen_on PORT: entries of outbox:order on PORT (0 when it does not answer).
xlen_on() { rcli "$1" XLEN outbox:order 2>/dev/null || echo 0; }

# lost_ids TAG SLOT: the ids of events committed before the slot's
# confirmed_flush_lsn (the relay confirmed them: Redis had acknowledged
# them) that the new master's outbox:order lacks. The audit slot audit_TAG,
# created before the first event, maps each id to its LSN.
lost_ids() {
	psql_q "SELECT lsn, data FROM pg_logical_slot_peek_changes('audit_$1', NULL, NULL, 'format-version', '2')" >"$T/audit.$1"
	$RX "127.0.0.1:$NEW_MASTER" fields outbox:order id >"$T/present.$1" || fail "$1: could not read outbox:order"
	python3 - "$T/audit.$1" "$T/present.$1" "$(slot_confirmed_lsn "$2")" <<-'PY'
		import json, sys
		def lsn(s):
		    hi, lo = s.split("/")
		    return int(hi, 16) << 32 | int(lo, 16)
		present = set(l.strip() for l in open(sys.argv[2]))
		confirmed = lsn(sys.argv[3])
		for line in open(sys.argv[1]):
		    at, _, data = line.rstrip("\n").partition("|")
		    d = json.loads(data)
		    if d.get("action") != "I" or d.get("table") != "outbox":
		        continue
		    i = next(c["value"] for c in d["columns"] if c["name"] == "id")
		    if lsn(at) < confirmed and i not in present:
		        print(i)
	PY
}

# failover TAG RELAY_ARGS...: the scenario above. Sets RESULT_* (events,
# lost, duplicated, time to resume), RELAY_STOPPED (the relay exited 7 when
# it found Redis behind what it had acknowledged) and NEW_MASTER.
failover() {
	local tag=$1 slot=sentinel_$1 l0 t_kill t_resume l i before
	shift
	replica_pair_start
	acl_users "$PRIMARY_PORT"
	acl_users "$REPLICA_PORT"
	if [ -n "$SENTINEL_PASSWORD" ]; then
		sentinels_start "$PRIMARY_PORT" 3 "requirepass $SENTINEL_PASSWORD"
	else
		sentinels_start "$PRIMARY_PORT" 3
	fi
	slot_create "$slot"
	slot_create "audit_$tag"
	REDIS_URL="redis-sentinel://outbox-relay:@$SENTINEL_ADDRS#$SENTINEL_NAME"
	RELAY_FLAGS=(--slot "$slot" --redis-password-file "$T/relay-password" --retry-max 1s --redis-timeout 2s "$@")
	relay_start "${RELAY_FLAGS[@]}"
	emitter_start "$tag" 1
	wait_for "[ \"\$(xlen_on $PRIMARY_PORT)\" -ge 200 ] || ! relay_alive" 30 && relay_alive ||
		fail "$tag: the relay did not publish 200 events on the master $PRIMARY_PORT ($(xlen_on "$PRIMARY_PORT")); $(tail -n 3 "$RELAY_LOG")"
	assert_match "$(cat "$RELAY_LOG")" "connected to Redis at master \"$SENTINEL_NAME\"/0 via Sentinel 127\\.0\\.0\\.1:[0-9]+ \\(3 Sentinels\\), at 127\\.0\\.0\\.1:$PRIMARY_PORT\$" \
		"$tag: the relay found the master $PRIMARY_PORT through the Sentinels"
	wait_for "[ \"\$(xlen_on $REPLICA_PORT)\" -ge 200 ]" 10 || fail "$tag: the replica does not follow"
	# The slot record (written before each confirmation) has reached the
	# replica: the relay's gap check at the next start has something to compare.
	wait_for "[ \"\$(rcli $REPLICA_PORT EXISTS outbox-relay:slot:$slot)\" = 1 ]" 30 ||
		fail "$tag: no slot record on the replica 30 s after the start"

	# The fault: the replication link cut (and the replica kept out: the
	# default user it connects as is switched off), then the master SIGKILLed
	# while the relay keeps writing to it.
	before=$(xlen_on "$PRIMARY_PORT")
	assert_eq "OK 1" "$(printf 'ACL SETUSER default off\nCLIENT KILL TYPE replica\n' | rcli "$PRIMARY_PORT" | tr '\n' ' ' | sed 's/ $//')" \
		"$tag: replication link cut, the replica kept out"
	sleep 0.5
	t_kill=$(date +%s%N)
	rnode_kill9 "$PRIMARY_PORT"
	l0=$(xlen_on "$REPLICA_PORT")
	log "$tag: master $PRIMARY_PORT killed 0.5 s after the cut (it held $before entries at the cut); the replica $REPLICA_PORT holds $l0"

	# The relay resumes on whatever Sentinel promotes, or stops (exit 7)
	# when what it finds there is behind what it had acknowledged.
	t_resume=
	RELAY_STOPPED=
	for i in $(seq 1 3000); do
		l=$(xlen_on "$REPLICA_PORT")
		if [ "$l" -gt "$l0" ]; then
			t_resume=$(date +%s%N)
			break
		fi
		if ! relay_alive; then
			t_resume=$(date +%s%N)
			RELAY_STOPPED=1
			break
		fi
		sleep 0.02
	done
	[ -n "$t_resume" ] || fail "$tag: nothing published on $REPLICA_PORT within 60 s of the kill; $(tail -n 5 "$RELAY_LOG")"
	RESULT_RESUME=$(awk -v a="$t_kill" -v b="$t_resume" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
	if [ -n "$RELAY_STOPPED" ]; then
		relay_wait 10 || true
		assert_eq 7 "$RELAY_RC" "$tag: the relay stopped: exit code"
		assert_contains "$(grep ' error: ' "$RELAY_LOG")" "Redis lost acknowledged writes" "$tag: the relay says Redis lost acknowledged writes"
		log "$tag: the relay stopped $RESULT_RESUME s after the kill: $(grep ' error: ' "$RELAY_LOG" | cut -c1-300)"
	else
		ok "$tag: the relay published on $REPLICA_PORT $RESULT_RESUME s after the kill"
	fi
	wait_for "[ \"\$(rcli $REPLICA_PORT ROLE | head_n 1)\" = master ]" 30 || fail "$tag: $REPLICA_PORT was not promoted"
	wait_for "sentinels_agree $REPLICA_PORT" 30 || fail "$tag: the Sentinels do not agree on $REPLICA_PORT"
	ok "$tag: Sentinel promoted $REPLICA_PORT"
	NEW_MASTER=$REPLICA_PORT

	# The old master comes back; Sentinel makes it a replica of the new one.
	rnode_start "$PRIMARY_PORT"
	if ! wait_for "[ \"\$(rcli $PRIMARY_PORT ROLE | head_n 1)\" = slave ] && replicas_synced $PRIMARY_PORT" 60; then
		# What each Sentinel and the old master said (a rare stall here: CI, 2026-11-27).
		for sp in $SENTINEL_PORTS; do
			log "Sentinel $sp: $(tail -n 12 "$T/sentinel.$sp/sentinel.log" 2>/dev/null | tr '\n' '|' | cut -c1-1500)"
		done
		log "old master $PRIMARY_PORT: ROLE $(rcli "$PRIMARY_PORT" ROLE 2>&1 | head_n 3 | tr '\n' ' '); $(tail -n 8 "$T/rnode.$PRIMARY_PORT/redis.log" 2>/dev/null | tr '\n' '|' | cut -c1-1000)"
		fail "$tag: the old master $PRIMARY_PORT did not rejoin as a replica"
	fi
	ok "$tag: the old master $PRIMARY_PORT rejoined as a replica of $NEW_MASTER"
	acl_users "$PRIMARY_PORT" # a restart forgets users made with ACL SETUSER (an aclfile would not)

	sleep 2 # events keep coming after the failover
	emitter_stop "$tag"
	grep -E '^[0-9a-f-]{36}$' "$T/emitted.$tag" >"$T/expected.$tag"
	RESULT_EVENTS=$(wc -l <"$T/expected.$tag")
	if [ -z "$RELAY_STOPPED" ]; then
		l=$(current_lsn)
		wait_confirmed "$slot" "$l" 60 || fail "$tag: not confirmed up to $l after the failover ($(slot_confirmed_lsn "$slot")); $(tail -n 5 "$RELAY_LOG")"
		relay_alive || fail "$tag: the relay exited"
	fi
	log "$tag: slot $slot confirmed at $(slot_confirmed_lsn "$slot"); slot record on the new master: $(rcli "$NEW_MASTER" GET "outbox-relay:slot:$slot")"
	lost_ids "$tag" "$slot" >"$T/lost.$tag"
	RESULT_LOST=$(wc -l <"$T/lost.$tag")
	$RX "127.0.0.1:$NEW_MASTER" fields outbox:order id >"$T/got.$tag" || fail "$tag: could not read outbox:order"
	RESULT_DUP=$(($(wc -l <"$T/got.$tag") - $(sort -u "$T/got.$tag" | wc -l)))
	if [ -z "$RELAY_STOPPED" ]; then
		relay_stop
		assert_eq 0 "$RELAY_RC" "$tag: relay exit code after SIGTERM"
	fi
}

# check_stream TAG WHAT: every committed event exactly once on the new
# master, in commit order.
check_stream() {
	$RX "127.0.0.1:$NEW_MASTER" fields outbox:order id >"$T/final.$1" || fail "$1: could not read outbox:order"
	ids_exactly_once "$T/expected.$1" "$T/final.$1" "$2"
	cmp -s "$T/expected.$1" "$T/final.$1" ||
		fail "$2: outbox:order is not in commit order ($(diff "$T/expected.$1" "$T/final.$1" | head_n 4 | tr '\n' ' '))"
	ok "$2: outbox:order in commit order"
}

# ---------------------------------------------------------------------------
# (a) --wait-replicas 1
# ---------------------------------------------------------------------------
SENTINEL_PASSWORD=$sentpw
failover wait --wait-replicas 1 --wait-timeout 500ms --redis-sentinel-password-file "$T/sentinel-password"
log "RESULT Sentinel failover with --wait-replicas 1: events=$RESULT_EVENTS lost=$RESULT_LOST duplicated=$RESULT_DUP time_to_resume=${RESULT_RESUME}s"
assert_eq "" "$RELAY_STOPPED" "--wait-replicas 1: the relay never stopped"
assert_eq 0 "$RESULT_LOST" "--wait-replicas 1: no committed event lost"
assert_eq 0 "$RESULT_DUP" "--wait-replicas 1: no event duplicated"
check_stream wait "--wait-replicas 1, new master $NEW_MASTER"
assert_not_contains "$(cat "$T"/relay.*.log)" "$sentpw" "no relay log holds the Sentinel password"
assert_not_contains "$(cat "$T"/relay.*.log)" "$relaypw" "no relay log holds the master password"

# outbox-consume through the Sentinels, as the shipped consumer user.
OUTBOX_CONSUME_REDIS_SENTINEL_PASSWORD=$sentpw timeout 60 "$CONSUME_BIN" \
	--redis-url "redis-sentinel://outbox-consume:@$SENTINEL_ADDRS#$SENTINEL_NAME" \
	--redis-password-file "$T/consume-password" --stream outbox:order --group g-sentinel \
	--create-group --count "$RESULT_EVENTS" --block-timeout 1s >"$T/consumed.jsonl" 2>"$T/consume.log" ||
	fail "outbox-consume through the Sentinels exited with $? ($(tail -n 3 "$T/consume.log"))"
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    print(json.loads(line)["id"])
' "$T/consumed.jsonl" >"$T/consumed.ids"
cmp -s "$T/expected.wait" "$T/consumed.ids" ||
	fail "outbox-consume through the Sentinels: ids differ from the committed ones ($(diff "$T/expected.wait" "$T/consumed.ids" | head_n 4 | tr '\n' ' '))"
ok "outbox-consume read all $RESULT_EVENTS events through the Sentinels, in order"
assert_contains "$(cat "$T/consume.log")" "connected to Redis at master \"$SENTINEL_NAME\"" "outbox-consume names the Sentinel master"
assert_not_contains "$(cat "$T/consume.log")" "$sentpw" "the consumer log does not hold the Sentinel password"

# outbox-consume with a wrong Sentinel password: exit 5, one line.
rc=0
OUTBOX_CONSUME_REDIS_SENTINEL_PASSWORD=wrong-$sentpw timeout 30 "$CONSUME_BIN" \
	--redis-url "redis-sentinel://outbox-consume:@$SENTINEL_ADDRS#$SENTINEL_NAME" \
	--redis-password-file "$T/consume-password" --stream outbox:order --group g-sentinel \
	--count 1 >/dev/null 2>"$T/consume-bad.log" || rc=$?
assert_eq 5 "$rc" "outbox-consume with a wrong Sentinel password: exit code"
assert_contains "$(cat "$T/consume-bad.log")" "AUTH refused" "outbox-consume: the Sentinel refused AUTH"
assert_not_contains "$(cat "$T/consume-bad.log")" "$sentpw" "outbox-consume: the wrong password is not printed"

# outbox-relay status through the Sentinels.
rc=0
OUTBOX_RELAY_REDIS_SENTINEL_PASSWORD=$sentpw timeout 30 "$RELAY_BIN" status --pg-dsn "$PG_DSN" \
	--slot sentinel_wait --redis-url "redis-sentinel://$SENTINEL_ADDRS#$SENTINEL_NAME" \
	>"$T/status.out" 2>&1 || rc=$?
assert_eq 0 "$rc" "outbox-relay status through the Sentinels: exit code ($(tail -n 2 "$T/status.out" | tr '\n' ' '))"
assert_contains "$(cat "$T/status.out")" "Redis: master \"$SENTINEL_NAME\"/0 via Sentinel" "status names the Sentinel target"
assert_match "$(grep -E '^ *outbox:order ' "$T/status.out")" "outbox:order +$RESULT_EVENTS " "status shows outbox:order with $RESULT_EVENTS entries"

# --check-config finds the master through the Sentinels and checks it.
rc=0
"$RELAY_BIN" --check-config --pg-dsn "$PG_DSN" --slot sentinel_wait --http-addr "" \
	--redis-url "redis-sentinel://outbox-relay:@$SENTINEL_ADDRS#$SENTINEL_NAME" \
	--redis-password-file "$T/relay-password" --redis-sentinel-password-file "$T/sentinel-password" \
	>"$T/check.out" 2>&1 || rc=$?
assert_contains "$(cat "$T/check.out")" "the Sentinels name 127.0.0.1:$NEW_MASTER as the master" "--check-config: the Sentinels' master"
assert_eq 0 "$(grep -c '^problem: Redis' "$T/check.out" || true)" "--check-config: no Redis problem"
log "--check-config exit code $rc"

# The relay's refusals, each exit 5 with one error line.
REDIS_URL="redis-sentinel://outbox-relay:@$SENTINEL_ADDRS#$SENTINEL_NAME"
printf 'wrong-%s\n' "$sentpw" >"$T/sentinel-password.bad"
relay_run --slot sentinel_wait --redis-password-file "$T/relay-password" \
	--redis-sentinel-password-file "$T/sentinel-password.bad" || true
assert_eq 5 "$RELAY_RC" "wrong Sentinel password: exit code"
assert_eq 1 "$(grep -c ' error: ' "$RELAY_LOG")" "wrong Sentinel password: one error line"
assert_contains "$(grep ' error: ' "$RELAY_LOG")" "AUTH refused" "wrong Sentinel password: the line says the Sentinel refused AUTH"
assert_not_contains "$(cat "$RELAY_LOG")" "$sentpw" "wrong Sentinel password: not logged"
REDIS_URL="redis-sentinel://outbox-relay:@$SENTINEL_ADDRS#no-such-master"
relay_run --slot sentinel_wait --redis-password-file "$T/relay-password" \
	--redis-sentinel-password-file "$T/sentinel-password" || true
assert_eq 5 "$RELAY_RC" "unknown master name: exit code"
assert_contains "$(grep ' error: ' "$RELAY_LOG")" "monitors no master named \"no-such-master\"" "unknown master name: named in the error"
REDIS_URL="redis-sentinel://outbox-relay:@$SENTINEL_ADDRS#$SENTINEL_NAME"
assert_eq OK "$(rcli "$NEW_MASTER" ACL SETUSER outbox-relay -role)" "ACL SETUSER outbox-relay -role on the master"
relay_run --slot sentinel_wait --redis-password-file "$T/relay-password" \
	--redis-sentinel-password-file "$T/sentinel-password" || true
assert_eq 5 "$RELAY_RC" "master user without +role: exit code"
assert_contains "$(grep ' error: ' "$RELAY_LOG")" "grant +role" "master user without +role: the line names the fix"
assert_eq OK "$(rcli "$NEW_MASTER" ACL SETUSER outbox-relay +role)" "ACL SETUSER outbox-relay +role again"

# A Sentinel ACL user limited to SENTINEL get-master-addr-by-name (the line
# deploy/redis/README.md suggests) is all the relay needs on the Sentinels.
for p in $SENTINEL_PORTS; do
	assert_eq OK "$(scli "$p" ACL SETUSER outbox-relay on ">$relaypw" -@all '+sentinel|get-master-addr-by-name')" "Sentinel $p: ACL user outbox-relay"
done
psql_q "SELECT outbox_emit('order', 'after', 'created', '{}')" >>"$T/expected.wait"
relay_drain --slot sentinel_wait --redis-password-file "$T/relay-password" \
	--redis-sentinel-user outbox-relay --redis-sentinel-password-file "$T/relay-password"
check_stream wait "Sentinel ACL user outbox-relay (AUTH user password, then SENTINEL get-master-addr-by-name only)"
sentinels_stop
SENTINEL_PASSWORD=
# Leave only the async mode's nodes for the cleanup.
rnode_stop "$PRIMARY_PORT"
rnode_stop "$REPLICA_PORT"

# ---------------------------------------------------------------------------
# (b) without WAIT
# ---------------------------------------------------------------------------
failover async
if [ -n "$RELAY_STOPPED" ]; then
	log "RESULT Sentinel failover without WAIT: events=$RESULT_EVENTS lost=$RESULT_LOST duplicated=$RESULT_DUP time_to_resume=none: the relay stopped (exit 7, Redis lost acknowledged writes) ${RESULT_RESUME}s after the kill"
else
	log "RESULT Sentinel failover without WAIT: events=$RESULT_EVENTS lost=$RESULT_LOST duplicated=$RESULT_DUP time_to_resume=${RESULT_RESUME}s"
fi
if [ "$RESULT_LOST" -gt 0 ]; then
	log "without WAIT, lost: $(head_n 3 <"$T/lost.async" | tr '\n' ' ')$([ "$RESULT_LOST" -gt 3 ] && echo ...) (the old master acknowledged them, the relay confirmed their LSN to PostgreSQL, the replica never received them)"
else
	log "without WAIT, no confirmed event was lost this time"
fi
assert_eq 0 "$RESULT_DUP" "without WAIT: no event duplicated"
if [ -n "$RELAY_STOPPED" ]; then
	# A plain restart first, as a supervisor would do: it must not stream
	# on past the loss. Either the slot stands past the slot record the new
	# master has (exit 8: the gap is refused), or everything the new master
	# lacks is still ahead of the slot and streams again. Before the fix,
	# the record write sent again after the reconnect landed behind the
	# refused calls and this restart streamed on with the events lost.
	relay_run_until "$(current_lsn)" "${RELAY_FLAGS[@]}" || true
	if [ "$RELAY_RC" = 8 ]; then
		ok "async: a plain restart refuses the gap (exit 8): $(grep -o 'replication slot [^;]*' "$RELAY_LOG" | head_n 1)"
	else
		assert_eq 0 "$RELAY_RC" "async: a plain restart either refuses the gap (8) or streams (0)"
		cp "$T/expected.async" "$T/expected.async_plain"
		check_stream async_plain "without WAIT, a plain restart that streamed on lost nothing"
	fi
	# The way back the exit 7 line names: republish from the outbox table
	# (here from this mode's first event: what is still there is dropped as
	# a duplicate), then start the relay again.
	since=$(psql_q "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM outbox WHERE id = '$(head_n 1 <"$T/expected.async")'")
	rc=0
	timeout -k 5 120 "$RELAY_BIN" republish --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" \
		--redis-password-file "$T/relay-password" --log-level info --http-addr "" --since "$since" \
		>"$T/republish.out" 2>&1 || rc=$?
	assert_eq 0 "$rc" "async: republish --since $since through the Sentinels ($(grep '^republish ' "$T/republish.out"))"
	relay_run_until "$(current_lsn)" "${RELAY_FLAGS[@]}" || true
	if [ "$RELAY_RC" = 8 ]; then
		accept=$(grep ' error: ' "$RELAY_LOG" | sed -n 's/.*--accept-gap \([0-9A-F]*\/[0-9A-F]*\).*/\1/p')
		log "async: the restart refuses a gap (exit 8); republished already, so --accept-gap $accept"
		relay_run_until "$(current_lsn)" "${RELAY_FLAGS[@]}" --accept-gap "$accept" || true
	fi
	assert_eq 0 "$RELAY_RC" "async: the relay streams again (exit 0 at --endpos)"
	check_stream async "without WAIT, after republish and a restart"
else
	check_stream async "without WAIT, new master $NEW_MASTER"
fi

# ---------------------------------------------------------------------------
# (c) a planned failover (SENTINEL FAILOVER) while the relay streams
# ---------------------------------------------------------------------------
# Sentinel demotes the live master (its clients are disconnected, or get
# READONLY) and promotes the replica: the relay asks the Sentinels again.
OLD=$NEW_MASTER
if [ "$OLD" = "$REPLICA_PORT" ]; then OTHER=$PRIMARY_PORT; else OTHER=$REPLICA_PORT; fi
relay_start "${RELAY_FLAGS[@]}" --wait-replicas 1 --wait-timeout 500ms
emitter_start planned 100000
wait_for "[ \"\$(xlen_on $OLD)\" -ge $(($(wc -l <"$T/expected.async") + 100)) ]" 30 ||
	fail "planned: the relay does not publish on $OLD; $(tail -n 3 "$RELAY_LOG")"
# Sentinel aborts a forced failover when it finds no good replica (one it has
# seen with its link up lately: $OTHER rejoined as a replica only seconds ago,
# and a slow machine stretches that), and does not try again by itself. So wait
# until every Sentinel sees the replica with its link up, and ask again while
# the master has not moved.
replica_good() {
	local p
	for p in $SENTINEL_PORTS; do
		scli "$p" SENTINEL REPLICAS "$SENTINEL_NAME" 2>/dev/null |
			awk 'prev == "flags" { f = $0 } prev == "master-link-status" { m = $0 } { prev = $0 }
			     END { exit !(f == "slave" && m == "ok") }' || return 1
	done
}
wait_for replica_good 30 || log "planned: not every Sentinel sees $OTHER as a replica with its link up; asking anyway"
moved=0
for try in 1 2 3; do
	r=$(scli "${SENTINEL_PORTS%% *}" SENTINEL FAILOVER "$SENTINEL_NAME" 2>&1)
	if [ "$try" = 1 ]; then
		assert_eq OK "$r" "planned: SENTINEL FAILOVER"
	else
		log "planned: SENTINEL FAILOVER again (try $try): $r"
	fi
	if wait_for "sentinels_agree $OTHER" 20; then
		moved=1
		break
	fi
	log "planned: the master did not move to $OTHER within 20 s of try $try"
	for sp in $SENTINEL_PORTS; do
		log "Sentinel $sp: $(tail -n 12 "$T/sentinel.$sp/sentinel.log" 2>/dev/null | tr '\n' '|' | cut -c1-1500)"
	done
done
[ "$moved" = 1 ] || fail "planned: the Sentinels did not move the master to $OTHER in 3 tries"
NEW_MASTER=$OTHER
l=$(xlen_on "$OTHER")
wait_for "[ \"\$(xlen_on $OTHER)\" -gt $l ]" 30 || fail "planned: nothing published on the new master $OTHER; $(tail -n 3 "$RELAY_LOG")"
ok "planned: the relay publishes on the new master $OTHER"
sleep 1
emitter_stop planned
l=$(current_lsn)
wait_for "replicas_synced $OLD" 60 || fail "planned: $OLD did not follow $OTHER"
wait_confirmed sentinel_async "$l" 60 || fail "planned: not confirmed up to $l ($(slot_confirmed_lsn sentinel_async)); $(tail -n 3 "$RELAY_LOG")"
relay_stop
assert_eq 0 "$RELAY_RC" "planned: relay exit code after SIGTERM"
grep -E '^[0-9a-f-]{36}$' "$T/emitted.planned" >>"$T/expected.async"
check_stream async "planned failover to $OTHER, --wait-replicas 1"
log "planned: how the relay learned: $(grep -m1 -E ' (warn|info): Redis: ' "$RELAY_LOG" | cut -c1-300 || echo '(nothing logged)')"

# ---------------------------------------------------------------------------
# (d) a stale Sentinel listed first: it names the replica
# ---------------------------------------------------------------------------
# A fourth Sentinel monitors the replica $OLD under the same name. It cannot
# learn better: its user on $OLD may not use the hello channel, so it never
# hears the other Sentinels. The relay must notice ROLE "slave", ask the
# others, and keep the stale one last from then on.
assert_eq OK "$(rcli "$OLD" ACL SETUSER stale on '>stale-pw' '~*' resetchannels +@all)" "stale: a user without channels on $OLD"
SP=$(free_tcp_port)
_sentinel_launch "$SP" "$OLD" "sentinel auth-user $SENTINEL_NAME stale" "sentinel auth-pass $SENTINEL_NAME stale-pw" \
	"sentinel down-after-milliseconds $SENTINEL_NAME 60000" || fail "the stale Sentinel does not start"
SENTINEL_PORTS="$SENTINEL_PORTS $SP" # stopped with the others
assert_eq "$OLD" "$(sentinel_master_port "$SP")" "stale: the fourth Sentinel names the replica $OLD"
assert_eq slave "$(rcli "$OLD" ROLE | head_n 1)" "stale: $OLD is a replica"
REDIS_URL="redis-sentinel://outbox-relay:@127.0.0.1:$SP,$SENTINEL_ADDRS#$SENTINEL_NAME"
psql_q "SELECT outbox_emit('order', 'stale-' || i, 'created', '{}') FROM generate_series(1, 20) i" >>"$T/expected.async"
relay_drain "${RELAY_FLAGS[@]}"
assert_eq 1 "$(grep -c "ROLE is \"slave\"" "$RELAY_LOG")" "stale: the relay saw ROLE slave once, then asked the other Sentinels first"
assert_eq "$OLD" "$(sentinel_master_port "$SP")" "stale: the fourth Sentinel still names $OLD"
check_stream async "stale Sentinel first in the URL"
rc=0
timeout 60 "$CONSUME_BIN" --redis-url "redis-sentinel://outbox-consume:@127.0.0.1:$SP,$SENTINEL_ADDRS#$SENTINEL_NAME" \
	--redis-password-file "$T/consume-password" --stream outbox:order --group g-stale --create-group \
	--count "$(wc -l <"$T/expected.async")" --block-timeout 1s >"$T/consumed.stale" 2>"$T/consume.stale.log" || rc=$?
assert_eq 0 "$rc" "stale: outbox-consume exit code ($(tail -n 2 "$T/consume.stale.log" | tr '\n' ' '))"
assert_eq "$(wc -l <"$T/expected.async")" "$(wc -l <"$T/consumed.stale")" "stale: outbox-consume read every event"
assert_contains "$(cat "$T/consume.stale.log")" "ROLE is \"slave\"" "stale: outbox-consume saw ROLE slave and retried"
pass
