#!/bin/bash
# 78_redis_aof_cut: Redis with AOF (appendfsync always) killed while it
# appended one of the relay's MULTI/EXEC writes, which it therefore never
# acknowledged: its AOF ends inside that block. Made deterministic here: the
# block is the relay's real write of event e6 (taken from a scratch server's
# AOF, where a relay on a second slot published e6), cut in the middle of its
# block and appended to the AOF of the server the relay publishes e1..e5 to.
# Redis 7.0.15 and 8.0.6 and Valkey 8.1.1 truncate such a file at the last
# whole command and keep the dangling MULTI; the next load then runs what the
# dangling block still holds inside the next EXEC (e6 twice, once from the cut
# block and once from the relay's retry), or refuses to start once an AOF
# rewrite opened a new file (README, "Redis with AOF after a crash").
#   (a) repaired as the README says (<server>-check-aof --fix, the harness's
#       redis_aof_repair): the server starts without the cut block, the relay
#       publishes e6..e10, the server restarts once more (a second load of the
#       same files), and the stream holds e1..e10 once each, in commit order;
#       the slot is confirmed past e10.
#   (b) the same cut, started without the repair: what this server then
#       holds is logged (RESULT line; the server's behaviour: Redis 7.0.15
#       holds e6 twice, Valkey 9.1.2 e1..e10 once each), and `outbox-relay
#       verify` over the scenario's rows must say so: exit 10 with the
#       duplicates counted, or exit 0 when the stream is intact. (a) ends with
#       the same verify, clean.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
AOF=(--appendonly yes --appendfsync always)

emit() { # emit STREAM_TAG AGGREGATE_ID
	psql_q "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
	        VALUES ('$1', '$2', 'created', '{\"n\": \"$2\"}')" >/dev/null
}
ids() { rx fields "outbox:$1" aggregate_id | tr '\n' ' ' | sed 's/ $//'; }
incr_file() { ls "$1/appendonlydir/"*.incr.aof | sort -t. -k3,3n | tail -n 1; } # incr_file DIR: the last one

# cut_block SRC DST: append to DST the last MULTI/EXEC block of SRC that
# holds an XADD, cut in the middle of the command after that XADD (the last
# bytes Redis wrote before the kill): the MULTI and the XADD stay whole.
cut_block() {
	python3 - "$1" "$2" <<-'PY'
		import sys
		src = open(sys.argv[1], 'rb').read()
		multi = b'*1\r\n$5\r\nMULTI\r\n'
		start = src.rindex(multi, 0, src.rindex(b'XADD'))
		xadd = src.index(b'XADD', start)
		after = src.index(b'\r\n*', xadd) + 2  # the command after the XADD
		end = src.index(b'\r\n*', after) + 2
		cut = src[start:(after + end) // 2]
		assert b'EXEC' not in cut, 'the XADD is the last command of its block'
		open(sys.argv[2], 'ab').write(cut)
		print(len(cut))
	PY
}

# scenario TAG REPAIR: e1..e5 published and confirmed, the cut e6 block
# appended, Redis started (after the repair when REPAIR=1), e6..e10
# published, Redis restarted; leaves the stream's ids in $GOT.
scenario() {
	local tag=$1 repair=$2 n end since dst
	since=$(psql_q "SELECT replace(now()::text, ' ', 'T')")
	rm -f "$T/redis.log"
	VERIFY_RC= VERIFY=
	redis_start "${AOF[@]}"
	slot_create "s_$tag"
	relay_start --slot "s_$tag" --retry-max 1s
	for i in 1 2 3 4 5; do emit "$tag" "e$i"; done
	end=$(current_lsn)
	wait_confirmed "s_$tag" "$end" 60 || fail "$tag: e1..e5 not confirmed"
	relay_stop
	redis_stop nosave
	mv "$T/redis" "$T/redis.$tag"

	# The block: a relay on a second slot writes e6 to a scratch server.
	slot_create "x_$tag"
	emit "$tag" e6
	redis_start "${AOF[@]}"
	relay_start --slot "x_$tag" --retry-max 1s
	wait_entries 1 60 "outbox:$tag" || fail "$tag: the scratch relay did not publish e6"
	relay_stop
	redis_stop nosave
	psql_q "SELECT pg_drop_replication_slot('x_$tag')" >/dev/null
	dst=$(incr_file "$T/redis.$tag")
	n=$(cut_block "$(incr_file "$T/redis")" "$dst")
	log "$tag: appended $n bytes of the relay's MULTI/EXEC write of e6 to $(basename "$dst"), cut after its XADD"
	rm -rf "$T/redis" && mv "$T/redis.$tag" "$T/redis"

	[ "$repair" = 1 ] && redis_aof_repair
	redis_start "${AOF[@]}"
	FIRST_LOAD=$(grep -E 'Truncat|Revert' "$T/redis.log" || true)
	assert_eq "e1 e2 e3 e4 e5" "$(ids "$tag")" "$tag: the started server holds e1..e5 and nothing of the cut block"
	relay_start --slot "s_$tag" --retry-max 1s
	for i in 7 8 9 10; do emit "$tag" "e$i"; done
	end=$(current_lsn)
	wait_confirmed "s_$tag" "$end" 60 || fail "$tag: e6..e10 not confirmed"
	relay_stop
	redis_stop nosave
	# The second load: a start that may fail (the server's behaviour in (b)).
	if redis_start_try "${AOF[@]}"; then
		GOT=$(ids "$tag")
		# the production checker over this scenario's rows
		VERIFY_RC=0
		"$RELAY_BIN" verify --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --http-addr "" \
			--since "$since" >"$T/verify.out" 2>"$T/verify.log" || VERIFY_RC=$?
		VERIFY=$(tail -n 1 "$T/verify.out")
		log "$tag: outbox-relay verify (exit $VERIFY_RC): $VERIFY"
		redis_stop nosave
	else
		GOT="(the server did not start: $(grep -E 'Fatal|Bad file|Unexpected' "$T/redis.log" | tail -n 1 | cut -c1-200 || true))"
	fi
	log "$tag: the server's log: $(grep -E 'Truncat|Revert|short read' "$T/redis.log" | sed 's/^[0-9]*:[A-Z] [^#]*# //' | tr '\n' ';' | cut -c1-400 || true)"
	rm -rf "$T/redis"
}

scenario cuta 1
assert_eq "e1 e2 e3 e4 e5 e6 e7 e8 e9 e10" "$GOT" "(a) repaired: after a second load the stream holds e1..e10 once each, in order"
if [ "$REDIS_AOF_REPAIR_RC" = 0 ]; then
	assert_ge "${REDIS_AOF_REPAIRS:-0}" 1 "(a) the check tool truncated the cut block"
	assert_eq "" "$FIRST_LOAD" "(a) the server found nothing to truncate or revert"
else
	# the tool failed (valkey-check-aof 9.1.2): the server must revert the block itself
	assert_contains "$FIRST_LOAD" "Revert incomplete MULTI/EXEC" "(a) the check tool failed (exit $REDIS_AOF_REPAIR_RC): the server reverted the cut block itself"
fi

assert_eq 0 "$VERIFY_RC" "(a) outbox-relay verify: clean"

scenario cutb 0
log "RESULT $(redis_server --version | cut -d' ' -f1-3) without the repair, after a second load: $GOT"
case "$GOT" in
"e1 e2 e3 e4 e5 e6 e7 e8 e9 e10")
	assert_eq 0 "$VERIFY_RC" "(b) this server loads the cut file correctly: outbox-relay verify is clean" ;;
"("*) log "(b) the server refused the second load; nothing to verify" ;;
*)
	# what the server did to the stream, the production checker finds
	assert_eq 10 "$VERIFY_RC" "(b) outbox-relay verify finds what the server's second load did to the stream"
	dups=$(tr ' ' '\n' <<<"$GOT" | sort | uniq -d | wc -l)
	assert_contains "$VERIFY" "duplicated=$dups " "(b) verify counts the events the load ran twice" ;;
esac
pass
