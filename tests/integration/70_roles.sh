#!/bin/bash
# 70_roles: the least-privileged accounts of sql/roles.sql and
# deploy/redis/users.acl are enough, and no more than that.
#  (a) PostgreSQL: the outbox_relay role (LOGIN REPLICATION only, no table
#      privileges), with a SCRAM password from --pg-password-file and a pg_hba
#      line that names the database (not "replication"), creates its slot and
#      delivers events; it cannot read the outbox table; a wrong password is
#      exit code 3.
#  (b) Redis: the outbox-relay ACL user delivers through FCALL and through
#      EVALSHA (--no-redis-functions), creates groups, writes dead letters;
#      FLUSHALL and keys outside its patterns are NOPERM; the outbox-consume user
#      can XREADGROUP/XACK but not XADD. The whole users.acl loads as an ACL file
#      once its placeholders are replaced, and refuses to load before.
#  (c) a wrong Redis password is exit code 5 with a one-line message that does
#      not contain the password (in the URL or in --redis-password-file).
#  (d) the shipped outbox-relay user in the other modes: single node with
#      --wait-replicas 1 against a primary + replica (WAIT, INFO) and Redis
#      Cluster (CLUSTER SLOTS), each exactly once; without +wait the relay
#      exits 5 with one line naming WAIT and +wait instead of retrying forever.
#  (e) --trim acked with the shipped outbox-relay user, single node (FCALL and
#      EVALSHA), with --wait-replicas 1, and in Redis Cluster: events arrive
#      exactly once, a group acknowledges them, the next round trims them, and
#      no NOPERM (XINFO GROUPS, XPENDING, XTRIM run inside the relay's call).
#      Without +xtrim the relay exits 5 with one line naming the permissions.
#  (f) PostgreSQL role with --plugin pgoutput (default slot and publication,
#      outbox_relay): (f1) without a publication the role cannot create one
#      (it is not the table's owner and has no CREATE on the database; nor
#      with CREATE on the database alone): exit code 3, one line giving the
#      CREATE PUBLICATION, no slot and no publication left;
#      (f2) once the table's owner (not a superuser) ran the CREATE PUBLICATION
#      of sql/roles.sql, the same role, still without table privileges, creates
#      its pgoutput slot and delivers events and messages exactly once, across
#      a restart.
RELAY_TIMEOUT=${RELAY_TIMEOUT:-60}
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS_DIR/.." && pwd)
ROLES_SQL=$ROOT/sql/roles.sql
ACL_FILE=$ROOT/deploy/redis/users.acl
[ -f "$ROLES_SQL" ] || fail "missing $ROLES_SQL"
[ -f "$ACL_FILE" ] || fail "missing $ACL_FILE"
setup_tmp
pg_start
load_schema
redis_start

secret() { od -An -tx1 -N12 /dev/urandom | tr -d ' \n'; }
sha256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# The relay's connection settings for relay_run/relay_drain; set per step.
RELAY_DSN=$PG_DSN
RELAY_REDIS=$REDIS_URL
# shellcheck disable=SC2034 # RELAY_ARGS is read by lib.sh
_relay_args() {
	RELAY_ARGS=(--pg-dsn "$RELAY_DSN" --redis-url "$RELAY_REDIS" --log-level "$RELAY_LOG_LEVEL"
		--http-addr "") # parallel tests would otherwise share :9187
}

# ack_all SOCK STREAM GROUP: GROUP reads and acknowledges every new entry of
# STREAM (as the test's admin); prints how many.
ack_all() {
	python3 -c "import sys
sys.path.insert(0, '$TESTS_DIR/integration')
from rx import Client
r = Client(sys.argv[1])
rep = r.call('XREADGROUP', 'GROUP', sys.argv[3], 'c1', 'COUNT', 100000, 'STREAMS', sys.argv[2], '>')
ids = [e[0] for e in rep[0][1]] if rep else []
print(r.call('XACK', sys.argv[2], sys.argv[3], *ids) if ids else 0)" "$@"
}

# acl_trim LABEL SLOT SOCK ARGS...: (e) a background relay as the shipped user
# (RELAY_REDIS; ARGS: its mode) with --trim acked --group gt publishes 20
# events to outbox:trimmed; they arrive exactly once; gt acknowledges them;
# the next round trims the stream; no NOPERM. The servers hold small stream
# nodes (stream-node-max-entries 4) so that XTRIM ~ can remove some.
acl_trim() {
	local label=$1 slot=$2 sock=$3
	shift 3
	: >"$T/expected"
	relay_start --slot "$slot" --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password" \
		--group gt --trim acked --trim-interval 1s "$@"
	emit 20 trimmed
	wait_confirmed "$slot" "$(current_lsn)" 30 || fail "($label) events not confirmed: $(tail -n 3 "$RELAY_LOG")"
	$RX "$sock" fields outbox:trimmed id >"$T/got.trim" || fail "($label) could not read outbox:trimmed"
	ids_exactly_once "$T/expected" "$T/got.trim" "($label) --trim acked, shipped ACL user"
	assert_eq 20 "$(ack_all "$sock" outbox:trimmed gt)" "($label) group gt acknowledged the 20 entries"
	wait_for "grep -q 'entries removed' '$RELAY_LOG'" 15 "a trim round" ||
		fail "($label) no trim round removed entries: $(grep -E 'trim|error' "$RELAY_LOG" | tail -n 3 || true)"
	relay_stop
	assert_eq 0 "$RELAY_RC" "($label) relay exit code"
	assert_not_contains "$(cat "$RELAY_LOG")" "NOPERM" "($label) no NOPERM with --trim acked"
	assert_lt "$($RX "$sock" cmd XLEN outbox:trimmed)" 20 "($label) outbox:trimmed was trimmed"
}

# emit N TYPE: N events through outbox_emit() in one transaction, ids to $T/expected.
emit() {
	psql_q "SELECT outbox_emit('$2', 'agg-' || i, 'created', jsonb_build_object('i', i))
	        FROM generate_series(1, $1) i" >>"$T/expected"
}

# ---------------------------------------------------------------------------
# (a) PostgreSQL role
# ---------------------------------------------------------------------------
for i in 1 2; do # twice: the file is idempotent
	psql -X -q -v ON_ERROR_STOP=1 -h "$T" -p "$PGPORT" -U postgres -d postgres -f "$ROLES_SQL" >/dev/null ||
		fail "loading sql/roles.sql (run $i) failed"
done
ok "sql/roles.sql loads twice"
assert_eq "t|t|f|f|f|f|0|f|f" "$(psql_q "SELECT r.rolcanlogin, r.rolreplication, r.rolsuper, r.rolcreatedb,
		r.rolcreaterole, r.rolbypassrls,
		(SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid),
		has_table_privilege(r.oid, 'public.outbox', 'SELECT'),
		has_table_privilege(r.oid, 'public.outbox', 'INSERT')
	FROM pg_roles r WHERE r.rolname = 'outbox_relay'")" \
	"outbox_relay: login, replication, nothing else (no memberships, no outbox privileges)"

pgpw=$(secret)
psql_q "ALTER ROLE outbox_relay PASSWORD '$pgpw'"
printf '%s\n' "$pgpw" >"$T/pg-password"
chmod 600 "$T/pg-password"

# pg_hba.conf (the harness trusts every local connection): SCRAM for
# outbox_relay on database "postgres" only, every other database rejected. A
# replication=database connection that did not match the database column
# would hit the reject line.
{
	echo "local postgres outbox_relay scram-sha-256"
	echo "local all      outbox_relay reject"
	cat "$PGDATA/pg_hba.conf"
} >"$T/pg_hba.new"
cat "$T/pg_hba.new" >"$PGDATA/pg_hba.conf" # keeps the file's owner (postgres)
assert_eq t "$(psql_q "SELECT pg_reload_conf()")" "pg_hba.conf reloaded"
assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL")" "pg_hba.conf has no errors"
wait_for "PGPASSWORD=$pgpw psql -X -A -t -h $T -p $PGPORT -U outbox_relay -d postgres -c 'SELECT 1'" 10 ||
	fail "outbox_relay cannot log in with its password"
out=$(PGPASSWORD=$pgpw psql -X -A -t -h "$T" -p "$PGPORT" -U outbox_relay -d template1 -c 'SELECT 1' 2>&1 || true)
assert_contains "$out" "rejects connection" "outbox_relay on another database hits the reject line"
out=$(PGPASSWORD=$pgpw psql -X -A -t -h "$T" -p "$PGPORT" -U outbox_relay -d postgres -c 'SELECT count(*) FROM public.outbox' 2>&1 || true)
assert_contains "$out" "permission denied" "outbox_relay cannot read the outbox table"

RELAY_DSN="host=$T port=$PGPORT user=outbox_relay dbname=postgres"
# First run: the role creates the slot (events committed before that are not
# decoded: SNAPSHOT 'nothing').
relay_drain --slot roles_slot --pg-password-file "$T/pg-password"
assert_eq "wal2json|f" "$(psql_q "SELECT plugin, temporary FROM pg_replication_slots WHERE slot_name = 'roles_slot'")" \
	"the outbox_relay role created the slot"
: >"$T/expected"
emit 20 order
emit 5 invoice
psql_q "SELECT outbox_emit_message('order', 'm-' || i, 'messaged', jsonb_build_object('i', i))
        FROM generate_series(1, 5) i" >>"$T/expected"

relay_drain --slot roles_slot --pg-password-file "$T/pg-password"
assert_exactly_once "$T/expected"

# Wrong PostgreSQL password: permanent, exit code 3, password not printed.
badpg=$(secret)
printf '%s\n' "$badpg" >"$T/pg-password.bad"
relay_run --slot roles_slot --pg-password-file "$T/pg-password.bad" || true
assert_eq 3 "$RELAY_RC" "wrong PostgreSQL password: exit code"
assert_not_contains "$(cat "$RELAY_LOG")" "$badpg" "the wrong PostgreSQL password is not logged"

# ---------------------------------------------------------------------------
# (b) Redis ACL users
# ---------------------------------------------------------------------------
relaypw=$(secret)
conspw=$(secret)
adminpw=$(secret)
sed -e "s/#RELAY_PASSWORD_SHA256/#$(sha256 "$relaypw")/" \
	-e "s/#CONSUMER_PASSWORD_SHA256/#$(sha256 "$conspw")/" \
	-e "s/#ADMIN_PASSWORD_SHA256/#$(sha256 "$adminpw")/" "$ACL_FILE" >"$T/users.acl"
if grep -q '_SHA256' "$T/users.acl"; then
	fail "users.acl has a placeholder this test does not know: $(grep -o '#[A-Z_]*_SHA256' "$T/users.acl" | head_n 3 | tr '\n' ' ')"
fi

# As written (placeholders), Redis refuses the file: nobody runs it by accident.
out=$(timeout 20 redis-server --port 0 --unixsocket "$T/r-placeholder.sock" --save '' \
	--aclfile "$ACL_FILE" --daemonize no 2>&1 || true)
assert_contains "$out" "password hash must be exactly 64 characters" "users.acl with its placeholders does not load"

# With hashes filled in, it loads as an ACL file: default off, four users.
redis-server --port 0 --unixsocket "$T/redis-acl.sock" --unixsocketperm 700 --save '' --appendonly no \
	--dir "$T/redis" --daemonize yes --pidfile "$T/redis-acl.pid" --logfile "$T/redis-acl.log" \
	--aclfile "$T/users.acl" || fail "redis-server --aclfile failed to start"
wait_for "[ -s '$T/redis-acl.pid' ]" 10 || fail "redis-server --aclfile wrote no pidfile: $(tail -n 3 "$T/redis-acl.log")"
cat "$T/redis-acl.pid" >>"$T/redis.pids"
acli() { redis-cli -s "$T/redis-acl.sock" --no-auth-warning --user admin --pass "$adminpw" "$@"; }
wait_for "[ \"\$(acli PING)\" = PONG ]" 10 || fail "admin cannot PING the --aclfile server"
assert_contains "$(redis-cli -s "$T/redis-acl.sock" PING 2>&1)" "NOAUTH" "default user is off: no commands without AUTH"
assert_eq "admin default outbox-consume outbox-relay" "$(acli ACL USERS | tr '\n' ' ' | sed 's/ $//')" "users.acl defines exactly these users"
acli SHUTDOWN NOSAVE >/dev/null 2>&1 || true

# The two service users, applied to the test Redis one line at a time
# (ACL SETUSER takes the same rules as an ACL file line).
while read -r -a words; do
	[ "${words[0]:-}" = user ] || continue
	case "${words[1]}" in
	outbox-relay | outbox-consume) ;;
	*) continue ;;
	esac
	assert_eq OK "$(redis_cli ACL SETUSER "${words[@]:1}")" "ACL SETUSER ${words[1]}"
done <"$T/users.acl"
assert_eq 1 "$(redis_cli ACL LIST | grep -c '^user outbox-relay ')" "outbox-relay user exists"
assert_eq 1 "$(redis_cli ACL LIST | grep -c '^user outbox-consume ')" "outbox-consume user exists"

# FCALL path (the default), with a consumer group (XGROUP CREATE) and a
# dead letter (a message that is not JSON).
RELAY_REDIS="unix://outbox-relay:$relaypw@$REDIS_SOCK"
emit 10 order
psql_q "SELECT pg_logical_emit_message(true, 'outbox', 'this is not json')" >/dev/null
relay_drain --slot roles_slot --pg-password-file "$T/pg-password" --group g1
assert_not_contains "$(cat "$RELAY_LOG")" "NOPERM" "no NOPERM in the relay log (FCALL path)"
assert_exactly_once "$T/expected"
assert_eq 1 "$(xlen outbox:dead-letter)" "the non-JSON message went to outbox:dead-letter"
assert_contains "$(redis_cli XINFO GROUPS outbox:order)" "g1" "group g1 was created on outbox:order"
assert_contains "$(redis_cli FUNCTION LIST LIBRARYNAME outbox_relay)" outbox_relay_publish \
	"the relay user loaded its function library"

# EVALSHA path, user in the URL and the password from --redis-password-file.
printf '%s\n' "$relaypw" >"$T/redis-password"
chmod 600 "$T/redis-password"
RELAY_REDIS="unix://outbox-relay:@$REDIS_SOCK"
emit 10 invoice
relay_drain --slot roles_slot --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password" \
	--no-redis-functions --group g1
assert_not_contains "$(cat "$RELAY_LOG")" "NOPERM" "no NOPERM in the relay log (EVALSHA path)"
assert_exactly_once "$T/expected"

# What the relay user may not do.
rcli_relay() { redis-cli -s "$REDIS_SOCK" --no-auth-warning --user outbox-relay --pass "$relaypw" "$@" 2>&1; }
assert_contains "$(rcli_relay FLUSHALL)" "NOPERM" "outbox-relay: FLUSHALL is refused"
assert_contains "$(rcli_relay KEYS '*')" "NOPERM" "outbox-relay: KEYS is refused"
assert_contains "$(rcli_relay CONFIG GET maxmemory)" "NOPERM" "outbox-relay: CONFIG is refused"
assert_contains "$(rcli_relay SET unrelated:key 1)" "NOPERM" "outbox-relay: keys outside outbox:* / outbox-relay:* are refused"
assert_contains "$(rcli_relay XREADGROUP GROUP g1 c1 COUNT 1 STREAMS outbox:order '>')" "NOPERM" "outbox-relay: XREADGROUP is refused"

# The consumer user reads and acknowledges, but cannot write entries.
rcli_cons() { redis-cli -s "$REDIS_SOCK" --no-auth-warning --user outbox-consume --pass "$conspw" "$@" 2>&1; }
got=$(rcli_cons XREADGROUP GROUP g1 c1 COUNT 1 STREAMS outbox:order '>')
assert_match "$got" '^outbox:order$' "outbox-consume: XREADGROUP returns an entry"
eid=$(sed -n 2p <<<"$got")
assert_eq 1 "$(rcli_cons XACK outbox:order g1 "$eid")" "outbox-consume: XACK $eid"
assert_contains "$(rcli_cons XADD outbox:order '*' id x)" "NOPERM" "outbox-consume: XADD is refused"
assert_contains "$(rcli_cons FLUSHALL)" "NOPERM" "outbox-consume: FLUSHALL is refused"
assert_contains "$(rcli_cons SCAN 0 MATCH 'outbox:*' TYPE stream COUNT 10000)" "outbox:order" "outbox-consume: SCAN finds the streams"
assert_eq OK "$(rcli_cons XGROUP CREATE outbox:order g2 0)" "outbox-consume: XGROUP CREATE"
assert_contains "$(rcli_cons XAUTOCLAIM outbox:order g1 c2 0 0-0 COUNT 1)" "0-0" "outbox-consume: XAUTOCLAIM"

# The real consumer, as that user: reads every event once through a new group.
if [ -x "$CONSUME_BIN" ]; then
	n=$(wc -l <"$T/expected") # --stream-pattern skips outbox:dead-letter
	timeout 60 "$CONSUME_BIN" --redis-url "unix://outbox-consume:@$REDIS_SOCK" \
		--redis-password-file <(printf '%s\n' "$conspw") --stream-pattern 'outbox:*' \
		--group g3 --create-group --count "$n" --block-timeout 1s >"$T/consumed.jsonl" 2>"$T/consume.log" ||
		fail "outbox-consume as outbox-consume exited with $? ($(tail -n 3 "$T/consume.log"))"
	assert_eq "$n" "$(wc -l <"$T/consumed.jsonl")" "outbox-consume (ACL user) printed $n entries"
	assert_not_contains "$(cat "$T/consumed.jsonl")" '"stream":"outbox:dead-letter"' "outbox-consume skipped the dead-letter stream"
	python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["stream"] != "outbox:dead-letter":
        print(e["id"])
' "$T/consumed.jsonl" | sort >"$T/consumed.ids"
	assert_eq "" "$(sort "$T/expected" | comm -3 - "$T/consumed.ids")" "outbox-consume read exactly the published event ids"
	assert_not_contains "$(cat "$T/consume.log")" "NOPERM" "no NOPERM in the consumer's log"
else
	log "no outbox-consume binary at $CONSUME_BIN: consumer ACL checked with redis-cli only"
fi

# (e) --trim acked on the single node, through FCALL and through EVALSHA.
redis_cli CONFIG SET stream-node-max-entries 4 >/dev/null
RELAY_REDIS="unix://outbox-relay:@$REDIS_SOCK"
acl_trim "e, FCALL" roles_slot "$REDIS_SOCK"
# Without +xtrim: a configuration error naming the permissions, not a retry.
assert_eq OK "$(redis_cli ACL SETUSER outbox-relay -xtrim)" "ACL SETUSER outbox-relay -xtrim"
emit 1 noxtrim
relay_run --slot roles_slot --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password" \
	--group gt --trim acked --trim-interval 1s || true
assert_eq 5 "$RELAY_RC" "(e) --trim acked without +xtrim: exit code"
errs=$(grep ' error: ' "$RELAY_LOG" || true)
assert_eq 1 "$(printf '%s\n' "$errs" | grep -c .)" "(e) one error line [${errs:0:400}]"
assert_contains "$errs" "--trim acked refused by the Redis ACL" "(e) the line names --trim acked"
assert_contains "$errs" "+xtrim" "(e) the line names the permission to grant"
assert_eq OK "$(redis_cli ACL SETUSER outbox-relay +xtrim)" "ACL SETUSER outbox-relay +xtrim"
acl_trim "e, EVALSHA" roles_slot "$REDIS_SOCK" --no-redis-functions

# ---------------------------------------------------------------------------
# (c) wrong Redis password
# ---------------------------------------------------------------------------
badpw=$(secret)
RELAY_REDIS="unix://outbox-relay:$badpw@$REDIS_SOCK"
relay_run --slot roles_slot --pg-password-file "$T/pg-password" || true
assert_eq 5 "$RELAY_RC" "wrong Redis password in the URL: exit code"
log1=$(cat "$RELAY_LOG")
assert_not_contains "$log1" "$badpw" "the wrong Redis password (URL) is not logged"
assert_eq 1 "$(grep -c 'WRONGPASS' "$RELAY_LOG")" "exactly one log line carries the WRONGPASS error"
assert_match "$(grep 'WRONGPASS' "$RELAY_LOG")" 'AUTH' "the WRONGPASS line names the AUTH step"
assert_eq 1 "$(grep -c " error: " "$RELAY_LOG")" "one error line"

printf '%s\n' "$badpw" >"$T/redis-password.bad"
RELAY_REDIS="unix://outbox-relay:@$REDIS_SOCK"
relay_run --slot roles_slot --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password.bad" || true
assert_eq 5 "$RELAY_RC" "wrong Redis password in --redis-password-file: exit code"
assert_not_contains "$(cat "$RELAY_LOG")" "$badpw" "the wrong Redis password (file) is not logged"
assert_eq 1 "$(grep -c 'WRONGPASS' "$RELAY_LOG")" "exactly one log line carries the WRONGPASS error"

# ---------------------------------------------------------------------------
# (d) the relay user with --wait-replicas and in Redis Cluster
# ---------------------------------------------------------------------------
# acl_relay_user PORT: the shipped outbox-relay line of users.acl as ACL SETUSER on PORT.
acl_relay_user() {
	local -a words
	read -r -a words < <(grep '^user outbox-relay ' "$T/users.acl")
	assert_eq OK "$(rcli "$1" ACL SETUSER "${words[@]:1}")" "ACL SETUSER outbox-relay on $1"
}

replica_pair_start
acl_relay_user "$PRIMARY_PORT"
RELAY_REDIS="redis://outbox-relay:@127.0.0.1:$PRIMARY_PORT"
relay_drain --slot roles_pair --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password"
: >"$T/expected"
emit 10 order
emit 5 invoice
relay_drain --slot roles_pair --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password" \
	--wait-replicas 1 --wait-timeout 2s
assert_not_contains "$(cat "$RELAY_LOG")" "NOPERM" "no NOPERM in the relay log (--wait-replicas 1)"
$RX "127.0.0.1:$PRIMARY_PORT" ids 'outbox:*' outbox:dead-letter >"$T/got.pair" || fail "could not read the primary's streams"
ids_exactly_once "$T/expected" "$T/got.pair" "primary, --wait-replicas 1, ACL user"

# Without +wait: a configuration error, not a WAIT that fell short.
assert_eq OK "$(rcli "$PRIMARY_PORT" ACL SETUSER outbox-relay -wait)" "ACL SETUSER outbox-relay -wait"
emit 3 order
RELAY_TIMEOUT=30 relay_run --slot roles_pair --pg-password-file "$T/pg-password" \
	--redis-password-file "$T/redis-password" --wait-replicas 1 --wait-timeout 2s --retry-max 1s || true
assert_eq 5 "$RELAY_RC" "ACL user without +wait, --wait-replicas 1: exit code"
assert_eq 1 "$(grep -c 'NOPERM' "$RELAY_LOG")" "one log line carries the NOPERM error"
line=$(grep 'NOPERM' "$RELAY_LOG")
assert_contains "$line" "WAIT refused by the Redis ACL" "the NOPERM line names WAIT"
assert_contains "$line" "grant +wait" "the NOPERM line names the fix (+wait)"
assert_contains "$line" "deploy/redis/users.acl" "the NOPERM line names users.acl"
assert_eq OK "$(rcli "$PRIMARY_PORT" ACL SETUSER outbox-relay +wait)" "ACL SETUSER outbox-relay +wait"
relay_drain --slot roles_pair --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password" \
	--wait-replicas 1 --wait-timeout 2s

# (e) --trim acked with --wait-replicas 1.
rcli "$PRIMARY_PORT" CONFIG SET stream-node-max-entries 4 >/dev/null
acl_trim "e, WAIT" roles_pair "127.0.0.1:$PRIMARY_PORT" --wait-replicas 1 --wait-timeout 2s

cluster_start 3 0
for p in $CLUSTER_MASTER_PORTS; do acl_relay_user "$p"; done
RELAY_REDIS=$(sed 's|^redis-cluster://|redis-cluster://outbox-relay:@|' <<<"$CLUSTER_URL")
relay_drain --slot roles_cluster --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password"
: >"$T/expected"
emit 20 order
emit 10 invoice
emit 10 customer
relay_drain --slot roles_cluster --pg-password-file "$T/pg-password" --redis-password-file "$T/redis-password"
assert_not_contains "$(cat "$RELAY_LOG")" "NOPERM" "no NOPERM in the relay log (Redis Cluster)"
cluster_ids_exactly_once "$T/expected"

# (e) --trim acked in Redis Cluster.
for p in $CLUSTER_MASTER_PORTS; do rcli "$p" CONFIG SET stream-node-max-entries 4 >/dev/null; done
acl_trim "e, Cluster" roles_cluster "127.0.0.1:$(cluster_live_port)"

# ---------------------------------------------------------------------------
# (f) the PostgreSQL role with --plugin pgoutput
# ---------------------------------------------------------------------------
# The outbox table's owner: an ordinary role with CREATE on the database, as
# CREATE PUBLICATION ... FOR TABLE requires.
psql_q "CREATE ROLE outbox_owner NOLOGIN; GRANT CREATE ON DATABASE postgres TO outbox_owner;
        ALTER TABLE public.outbox OWNER TO outbox_owner" >/dev/null
RELAY_REDIS=$REDIS_URL
PGO=(--plugin pgoutput --stream 'pgo:{aggregate_type}' --dead-letter-stream pgo:dead-letter
	--pg-password-file "$T/pg-password") # default --slot and --publication: outbox_relay
pgo_slot() { psql_q "SELECT plugin FROM pg_replication_slots WHERE slot_name = 'outbox_relay'"; }

# (f1) No publication: the role may not create it.
emit 3 order
relay_run "${PGO[@]}" || true
assert_eq 3 "$RELAY_RC" "(f1) pgoutput without a publication, not the table's owner: exit code"
errs=$(grep ' error: ' "$RELAY_LOG" || true)
assert_eq 1 "$(printf '%s\n' "$errs" | grep -c .)" "(f1) one error line [${errs:0:400}]"
assert_eq 1 "$(grep -c 'CREATE PUBLICATION' "$RELAY_LOG")" "(f1) one log line gives the CREATE PUBLICATION"
assert_contains "$errs" "CREATE PUBLICATION \"outbox_relay\" FOR TABLE \"public\".\"outbox\" WITH (publish = 'insert')" \
	"(f1) the line gives the statement"
assert_contains "$errs" "as the table's owner" "(f1) the line says who runs it"
assert_eq "" "$(pgo_slot)" "(f1) no slot was made"
assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_publication")" "(f1) no publication was made"
assert_eq "" "$(rx streams 'pgo:*')" "(f1) nothing was published"
# CREATE on the database alone is not enough either: the table's ownership is.
psql_q "GRANT CREATE ON DATABASE postgres TO outbox_relay" >/dev/null
relay_run "${PGO[@]}" || true
psql_q "REVOKE CREATE ON DATABASE postgres FROM outbox_relay" >/dev/null
assert_eq 3 "$RELAY_RC" "(f1) with CREATE on the database, still not the owner: exit code"
assert_eq 1 "$(grep -c 'CREATE PUBLICATION' "$RELAY_LOG")" "(f1) one log line gives the CREATE PUBLICATION"
assert_contains "$(grep ' error: ' "$RELAY_LOG")" "must be owner of table outbox" "(f1) the line says the owner is needed"
assert_eq "" "$(pgo_slot)" "(f1) still no slot"

# (f2) The owner runs what sql/roles.sql says (its one CREATE PUBLICATION line).
sql=$(sed -n 's/^--[[:space:]]*\(CREATE PUBLICATION .*\)$/\1/p' "$ROLES_SQL")
assert_eq 1 "$(printf '%s\n' "$sql" | grep -c .)" "(f2) sql/roles.sql gives one CREATE PUBLICATION [$sql]"
psql_q "SET ROLE outbox_owner; $sql" >/dev/null || fail "(f2) the table's owner could not run [$sql]"
assert_eq "outbox_owner|t|f|f|f" "$(psql_q "SELECT pubowner::regrole, pubinsert, pubupdate, pubdelete, pubtruncate
	FROM pg_publication WHERE pubname = 'outbox_relay'")" "(f2) publication outbox_relay, owned by outbox_owner, inserts only"
relay_drain "${PGO[@]}"
assert_eq pgoutput "$(pgo_slot)" "(f2) the outbox_relay role created the pgoutput slot"
assert_match "$(cat "$RELAY_LOG")" 'slot "outbox_relay" streams with pgoutput, publication "outbox_relay"' \
	"(f2) the relay streams with pgoutput and the publication"
: >"$T/expected" # the rows of (f1) predate the slot
emit 20 order
emit 5 invoice
psql_q "SELECT outbox_emit_message('order', 'pm-' || i, 'messaged', jsonb_build_object('i', i))
        FROM generate_series(1, 5) i" >>"$T/expected"
relay_drain "${PGO[@]}"
emit 5 customer # and after a restart on the existing slot
relay_drain "${PGO[@]}"
rx ids 'pgo:*' pgo:dead-letter >"$T/got.pgo" || fail "(f2) could not read pgo:*"
ids_exactly_once "$T/expected" "$T/got.pgo" "(f2) pgoutput, outbox_relay role"
assert_eq 35 "$(wc -l <"$T/got.pgo")" "(f2) 35 entries in pgo:*"
assert_eq 0 "$(xlen pgo:dead-letter)" "(f2) no dead letters"
assert_eq "f|f|f|f" "$(psql_q "SELECT has_table_privilege('outbox_relay', 'public.outbox', 'SELECT'),
		has_database_privilege('outbox_relay', 'postgres', 'CREATE'),
		pg_has_role('outbox_relay', 'outbox_owner', 'USAGE'),
		(SELECT rolsuper FROM pg_roles WHERE rolname = 'outbox_relay')")" \
	"(f2) the role still has no SELECT on the outbox, no CREATE on the database, is not the owner, not superuser"

# No relay log ever contained a real password either.
all_logs=$(cat "$T"/relay.*.log)
assert_not_contains "$all_logs" "$pgpw" "no relay log contains the PostgreSQL password"
assert_not_contains "$all_logs" "$relaypw" "no relay log contains the Redis password"
pass
