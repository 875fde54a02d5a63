#!/bin/bash
# 35_watermark_guards: the publish function's watermark and dedup keys cannot
# drop an event that was never written (issue 14, findings 2, 3 and 4).
#   (a) The shipped ACL (deploy/redis/users.acl, no DEL): outbox:order holds a
#       string while order events commit. Each refused entry is dead-lettered
#       in the same call; after DEL outbox:order new events flow. Every order
#       id is in Redis exactly once (stream or dead letter), none dropped as a
#       "duplicate" of a failed attempt; no NOPERM anywhere.
#   (b) Streams sharing a hash tag ({orders}:order, {orders}:customer) keep
#       their own watermark and dedup keys: two messages with the same id go
#       to both streams. While the ACL refuses {orders}:order the relay stops
#       with exit 5 and one line naming that stream and the ACL patterns
#       (issue 11 §4: NOPERM of any kind is a configuration error); once it is
#       granted every order and customer event arrives once.
#   (d) The same for the other keys of a call: a --dead-letter-stream and a
#       --key-prefix (watermark, dedup, slot record keys) outside the ACL
#       user's patterns: exit 5, one line naming the key, nothing published.
#   (c) A second PostgreSQL system (fresh initdb) behind the same Redis, slot
#       name and key prefix: the relay refuses with exit 7 and one line naming
#       the fix, publishes nothing; with its own --key-prefix it delivers.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start

sha256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
ACL_FILE=$TESTS_DIR/../deploy/redis/users.acl

# relay_acl_user RULES...: (re)create the outbox-relay user from users.acl's
# line, with password $RELAY_PW, plus extra RULES.
RELAY_PW=relay-pw-35
relay_acl_user() {
	local line
	line=$(grep '^user outbox-relay ' "$ACL_FILE") || fail "no outbox-relay user in $ACL_FILE"
	line=${line#user outbox-relay }
	line=${line//\#RELAY_PASSWORD_SHA256/\#$(sha256 "$RELAY_PW")}
	# One command (reset first), so the relay never finds the user missing.
	# shellcheck disable=SC2086 # the rules are words
	assert_eq OK "$(redis_cli ACL SETUSER outbox-relay reset $line "$@")" "ACL SETUSER outbox-relay from users.acl $*"
}

# want PART: run this part (all by default; ONLY="b c" runs those, e.g. to
# show a part failing against an older binary).
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# dl_entries_since N: dead-letter entries after the first N, one JSON per line.
dl_entries_since() { rx entries outbox:dead-letter | tail -n +"$(($1 + 1))"; }

# ---------------------------------------------------------------------------
# (a) the shipped ACL, a stream key of another type
# ---------------------------------------------------------------------------
if want a; then
	relay_acl_user
	REDIS_URL="unix://outbox-relay:$RELAY_PW@$REDIS_SOCK"
	relay_start
	wait_for "slot_active outbox_relay" 20 || fail "(a) relay did not start streaming"
	emit_orders_customers 1 100
	wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "(a) first batch not confirmed"
	# SET replaces the stream: the first 50 order events go with it (not checked).
	assert_eq OK "$(redis_cli SET outbox:order 'not a stream')" "(a) outbox:order is a string"
	emit_orders_customers 101 300
	wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "(a) not confirmed past the refused order events (stalled)"
	redis_cli DEL outbox:order >/dev/null
	emit_orders_customers 301 400
	wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "(a) not confirmed after DEL outbox:order"
	relay_stop
	assert_eq 0 "$RELAY_RC" "(a) relay exit code after SIGTERM"
	assert_eq 0 "$(grep -c NOPERM "$RELAY_LOG" || true)" "(a) no NOPERM: the shipped ACL grants what the function sends"
	dl_entries_since 0 | python3 -c 'import json, sys
for line in sys.stdin:
    f = dict(json.loads(line)["fields"])
    print(json.loads(f["raw"])["id"])' >"$T/a.dl"
	{ rx fields outbox:order id; cat "$T/a.dl"; } >"$T/a.got"
	psql_q "SELECT id FROM outbox WHERE aggregate_type = 'order' AND aggregate_id::int > 100" >"$T/a.exp"
	ids_exactly_once "$T/a.exp" "$T/a.got" "(a) order events: stream or dead letter"
	assert_eq 100 "$(wc -l <"$T/a.dl")" "(a) the 100 order events committed while the key was a string are dead letters"
	psql_q "SELECT id FROM outbox WHERE aggregate_type = 'customer' ORDER BY aggregate_id::int" >"$T/a.cust"
	assert_stream_ids outbox:customer "$T/a.cust"
fi

# ---------------------------------------------------------------------------
# (b) two streams behind one hash tag
# ---------------------------------------------------------------------------
if want b; then
	STREAM_B='{{orders}}:{aggregate_type}'
	relay_acl_user '~{orders}:*'
	relay_start --slot tags --stream "$STREAM_B"
	wait_for "slot_active tags" 20 || fail "(b) relay did not start streaming"
	# The same event id on both streams (logical messages carry their own id).
	same=5e1f1d3e-0b7a-4a51-9d0e-35353535aaaa
	for t in order customer; do
		psql_q "SELECT pg_logical_emit_message(true, 'outbox', json_build_object('id', '$same',
		  'aggregate_type', '$t', 'aggregate_id', 'm-$t', 'event_type', 'e', 'payload', '{}'::json)::text)" >/dev/null
	done
	wait_confirmed tags "$(current_lsn)" 30 || fail "(b) messages not confirmed"
	assert_eq "$same" "$(rx fields '{orders}:order' id)" "(b) {orders}:order has the message"
	assert_eq "$same" "$(rx fields '{orders}:customer' id)" "(b) {orders}:customer has the message with the same id (not a duplicate of the other stream's)"
	# Refuse {orders}:order only: a configuration error (exit 5, one line
	# naming the stream and the patterns), not a retry loop.
	relay_acl_user '~{orders}:customer'
	emit_orders_customers 1001 1400
	l_b=$(current_lsn)
	relay_wait 30 || fail "(b) the relay did not stop on the refused key"
	assert_eq 5 "$RELAY_RC" "(b) exit code for a key outside the ACL user's patterns"
	errs=$(grep -E ' error: ' "$RELAY_LOG" || true)
	assert_eq 1 "$(printf '%s\n' "$errs" | grep -c .)" "(b) one error line [${errs:0:400}]"
	assert_contains "$errs" 'publish to stream "{orders}:order" refused by the Redis ACL (NOPERM' "(b) the line names the call's stream and the refusal"
	assert_contains "$errs" "~outbox:* ~outbox-relay:* in deploy/redis/users.acl" "(b) the line names the fix"
	assert_lsn_lt "$(slot_confirmed_lsn tags)" "$l_b" "(b) not confirmed past the refused order events"
	relay_acl_user '~{orders}:customer' '~{orders}:order'
	relay_run_until "$l_b" --slot tags --stream "$STREAM_B" || fail "(b) relay after {orders}:order was granted: exit $RELAY_RC"
	relay_stop
	psql_q "SELECT id FROM outbox WHERE aggregate_type = 'order' AND aggregate_id::int >= 1001 ORDER BY aggregate_id::int" >"$T/b.order"
	rx fields '{orders}:order' id | tail -n +2 >"$T/b.got"
	assert_eq "$(cat "$T/b.order")" "$(cat "$T/b.got")" "(b) every order event of the refused window arrived, in order, once"
	psql_q "SELECT id FROM outbox WHERE aggregate_type = 'customer' AND aggregate_id::int >= 1001 ORDER BY aggregate_id::int" >"$T/b.cust"
	rx fields '{orders}:customer' id | tail -n +2 >"$T/b.cgot"
	assert_eq "$(cat "$T/b.cust")" "$(cat "$T/b.cgot")" "(b) every customer event arrived, in order, once"
	REDIS_URL=unix://$REDIS_SOCK
fi

# ---------------------------------------------------------------------------
# (c) another PostgreSQL system behind the same Redis, slot and prefix
# ---------------------------------------------------------------------------
if want c; then
	sysid_a=$(psql_q "SELECT system_identifier FROM pg_control_system()")
	emit_orders_customers 2001 2400
	relay_run_until "$(current_lsn)" || fail "(c) first system's drain failed"
	pg_stop fast
	rm -rf "$T/pg"
	PG_FRESH_INITDB=1 pg_start
	load_schema
	sysid_b=$(psql_q "SELECT system_identifier FROM pg_control_system()")
	[ "$sysid_a" != "$sysid_b" ] || fail "(c) initdb gave the same system identifier (test bug)"
	slot_create outbox_relay
	ids_c=$(psql_q "SELECT outbox_emit('order', 'c-' || i, 'created', '{}') FROM generate_series(1, 5) i")
	n0=$(xlen outbox:order)
	relay_run --slot outbox_relay || true
	assert_eq 7 "$RELAY_RC" "(c) exit code for watermarks of another database"
	errs=$(grep -E ' error: ' "$RELAY_LOG" || true)
	assert_eq 1 "$(printf '%s\n' "$errs" | grep -c .)" "(c) one error line [${errs:0:400}]"
	assert_contains "$errs" "$sysid_a" "(c) the line names the other database's system identifier"
	assert_contains "$errs" "--key-prefix" "(c) the line names the fix"
	assert_eq "$n0" "$(xlen outbox:order)" "(c) nothing published"
	relay_run_until "$(current_lsn)" --key-prefix second || fail "(c) relay with its own --key-prefix failed"
	rx fields outbox:order id | tail -n 5 >"$T/c.got"
	assert_eq "$ids_c" "$(cat "$T/c.got")" "(c) with its own --key-prefix the five events arrive"
fi

# ---------------------------------------------------------------------------
# (d) a dead-letter stream or --key-prefix outside the ACL user's patterns
# ---------------------------------------------------------------------------
if want d; then
	relay_acl_user
	REDIS_URL="unix://outbox-relay:$RELAY_PW@$REDIS_SOCK"
	slot_create acl_d
	ids_d=$(psql_q "SELECT outbox_emit('order', 'd-' || i, 'created', '{}') FROM generate_series(1, 5) i")
	n0=$(xlen outbox:order)
	relay_run --slot acl_d --dead-letter-stream dl:refused --retry-max 1s || true
	assert_eq 5 "$RELAY_RC" "(d) --dead-letter-stream outside the patterns: exit code"
	errs=$(grep -E ' error: ' "$RELAY_LOG" || true)
	assert_eq 1 "$(printf '%s\n' "$errs" | grep -c .)" "(d) one error line [${errs:0:400}]"
	assert_contains "$errs" "refused by the Redis ACL (NOPERM" "(d) the line says the ACL refused it"
	assert_contains "$errs" 'dead-letter stream "dl:refused"' "(d) the line names the dead-letter stream"
	relay_run --slot acl_d --key-prefix refused-prefix --retry-max 1s || true
	assert_eq 5 "$RELAY_RC" "(d) --key-prefix outside the patterns: exit code"
	errs=$(grep -E ' error: ' "$RELAY_LOG" || true)
	assert_eq 1 "$(printf '%s\n' "$errs" | grep -c .)" "(d) one error line [${errs:0:400}]"
	assert_contains "$errs" "refused by the Redis ACL (NOPERM" "(d) the line says the ACL refused it"
	assert_contains "$errs" "refused-prefix:" "(d) the line names the refused key"
	assert_eq "$n0" "$(xlen outbox:order)" "(d) nothing published while refused"
	relay_drain --slot acl_d
	rx fields outbox:order id | tail -n 5 >"$T/d.got"
	assert_eq "$ids_d" "$(cat "$T/d.got")" "(d) with the patterns granted the five events arrive once"
	REDIS_URL=unix://$REDIS_SOCK
fi
pass
