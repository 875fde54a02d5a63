#!/bin/bash
# 38_check_config: --check-config checks the prerequisites and lists every
# problem it finds in one run, one line each naming the fix, then
# "N problem(s) found", and exits 9; an all-good run exits 0 and leaves
# nothing behind (no slot, no publication, no Redis key or function);
# --check-config-offline connects nowhere. The plugin checked is an existing
# slot's, else --plugin; pgoutput also checks the publication.
# RELAY_PLUGIN=pgoutput: the all-good and --no-create-slot runs pass --plugin
# pgoutput (the section 5 cases name their plugin themselves).
. "$(dirname "$0")/lib.sh"
setup_tmp

# check NAME ARGS...: outbox-relay --check-config ARGS (at most 60 s), clean
# environment; sets RC and OUT (stdout + stderr).
check() {
	local name=$1
	shift
	RC=0
	env -u OUTBOX_RELAY_PG_DSN -u OUTBOX_RELAY_REDIS_URL timeout -k 2 60 "$RELAY_BIN" --check-config \
		--http-addr "" "$@" >"$T/$name.out" 2>&1 </dev/null || RC=$?
	OUT=$(cat "$T/$name.out")
	log "check $name: exit code $RC"
}
# has_line NAME TEXT WHAT [KIND]: one output line starts with "KIND: " (default
# problem) and contains TEXT.
has_line() {
	grep -F -- "$2" "$T/$1.out" | grep -q "^${4:-problem}: " ||
		fail "$3: no ${4:-problem} line with [$2] in:
$OUT"
	ok "$3"
}
PLUGIN=${RELAY_PLUGIN:-wal2json}
PLUGIN_ARGS=(${RELAY_PLUGIN:+--plugin "$RELAY_PLUGIN"})

# ---------------------------------------------------------------------------
# 1. Nothing reachable: one problem per server, the dependent checks skipped.
# ---------------------------------------------------------------------------
check down --pg-dsn "host=$T/nowhere port=1 dbname=x connect_timeout=2" --redis-url "unix://$T/nowhere.sock"
assert_eq 9 "$RC" "nothing reachable: exit code 9"
has_line down "start PostgreSQL or fix the host and port in --pg-dsn" "PostgreSQL unreachable is a problem, naming the fix"
has_line down "the other PostgreSQL checks" "the PostgreSQL checks that need a connection are skipped, said so" skipped
has_line down "Redis at unix:$T/nowhere.sock: could not connect" "Redis unreachable is a problem"
assert_contains "$OUT" "2 problem(s) found" "nothing reachable: 2 problem(s) found"

# ---------------------------------------------------------------------------
# 2. Several things wrong at once: wal_level = replica, no outbox table, a role
#    without REPLICATION, a wrong Redis password (and, where the server has
#    the setting, wal2json not in output_plugin_libraries).
# ---------------------------------------------------------------------------
extra=()
nexp=4
if pg_has_setting output_plugin_libraries; then
	extra=(output_plugin_libraries=pgoutput)
fi
pg_start wal_level=replica "${extra[@]}"
psql_q "CREATE ROLE norepl LOGIN"
redis_start --requirepass right-pass
BAD_DSN="host=$T port=$PGPORT user=norepl dbname=postgres"
BAD_URL="unix://:wrong-pass@$REDIS_SOCK"

check many --pg-dsn "$BAD_DSN" --redis-url "$BAD_URL"
assert_eq 9 "$RC" "several problems: exit code 9"
has_line many "AUTH failed: WRONGPASS" "wrong Redis password is a problem"
has_line many "(check the user and password in --redis-url or --redis-password-file)" "the Redis line names the fix"
has_line many "the other Redis checks" "Redis checks after AUTH are skipped, said so" skipped
has_line many "logical decoding requires wal_level >= logical (it is replica); set wal_level = logical in postgresql.conf and restart PostgreSQL" \
	"wal_level = replica is a problem, with the fix"
has_line many 'outbox table "public.outbox" does not exist: create it (see sql/outbox.sql) or point --table at your outbox table' \
	"missing outbox table is a problem, with the relay's wording"
# PostgreSQL 16 reworded the server's message; the relay's fix is the same.
if [ "$(pg_version_num)" -ge 160000 ]; then
	walsender_denied="permission denied to start WAL sender; grant it with: ALTER ROLE <user> REPLICATION"
else
	walsender_denied="must be superuser or replication role to start walsender; grant it with: ALTER ROLE <user> REPLICATION"
fi
has_line many "$walsender_denied" "role without REPLICATION is a problem, with the relay's wording"
assert_eq "$nexp" "$(grep -c '^problem: ' "$T/many.out")" "exactly $nexp problem lines"
assert_contains "$OUT" "$nexp problem(s) found" "summary: $nexp problem(s) found"
assert_not_contains "$OUT" "wrong-pass" "the Redis password is not printed"
assert_not_contains "$OUT" "configuration OK" "no 'configuration OK' when there are problems"
assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_replication_slots")" "several problems: no slot created"
if [ ${#extra[@]} -gt 0 ]; then
	# A role without REPLICATION may not read output_plugin_libraries: ask
	# as the superuser, on the same server.
	check opl --pg-dsn "$PG_DSN" --redis-url "unix://:right-pass@$REDIS_SOCK"
	has_line opl 'library "wal2json" may not be used as an output plugin; add wal2json to output_plugin_libraries' \
		"wal2json not in output_plugin_libraries is a problem"
	assert_eq 9 "$RC" "output_plugin_libraries without wal2json: exit 9"
fi
assert_eq 0 "$(redis_cli DBSIZE)" "several problems: no Redis key"

# The offline mode: options only, connects nowhere, exit 0.
check offline --pg-dsn "$BAD_DSN" --redis-url "$BAD_URL" --check-config-offline
assert_eq 0 "$RC" "--check-config-offline: exit code 0"
assert_contains "$OUT" "configuration OK" "--check-config-offline: configuration OK"
assert_not_contains "$OUT" "problem" "--check-config-offline: checks nothing"
RC=0
env OUTBOX_RELAY_PG_DSN="$BAD_DSN" OUTBOX_RELAY_REDIS_URL="$BAD_URL" OUTBOX_RELAY_CHECK_CONFIG_OFFLINE=true \
	"$RELAY_BIN" --http-addr "" >"$T/offline_env.out" 2>&1 || RC=$?
assert_eq 0 "$RC" "OUTBOX_RELAY_CHECK_CONFIG_OFFLINE=true: exit code 0"
assert_contains "$(cat "$T/offline_env.out")" "configuration OK" "OUTBOX_RELAY_CHECK_CONFIG_OFFLINE=true: configuration OK"

# An invalid option is still exit 2, before connecting anywhere.
check badstream --pg-dsn "$BAD_DSN" --redis-url "$BAD_URL" --stream 'outbox:{'
assert_eq 2 "$RC" "invalid --stream: exit code 2"
assert_not_contains "$OUT" "problem(s) found" "invalid --stream: no prerequisite checks"

# ---------------------------------------------------------------------------
# 3. The slot and the columns: a test_decoding slot, two missing columns.
# ---------------------------------------------------------------------------
pg_stop
pg_start
load_schema
redis_stop
redis_start
slot_create s_td test_decoding
check cols --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --slot s_td --id-column nope --stream 'outbox:{nada}'
assert_eq 9 "$RC" "slot and columns: exit code 9"
has_line cols 'column "nope" (named by --id-column) does not exist in outbox table "public.outbox": add the column or fix --id-column' \
	"missing --id-column is a problem"
has_line cols 'column "nada" (named by --stream) does not exist in outbox table "public.outbox": add the column or fix --stream' \
	"missing --stream column is a problem (in the same run)"
has_line cols "replication slot \"s_td\" exists but is a logical slot with plugin \"test_decoding\"; outbox-relay needs a logical wal2json or pgoutput slot: use another --slot or drop it with SELECT pg_drop_replication_slot('s_td')" \
	"a test_decoding slot is a problem"
assert_contains "$OUT" "3 problem(s) found" "slot and columns: 3 problem(s) found"
psql_q "SELECT pg_drop_replication_slot('s_td')" >/dev/null

# --no-create-slot with no slot.
check noslot --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --no-create-slot "${PLUGIN_ARGS[@]}"
assert_eq 9 "$RC" "--no-create-slot without the slot: exit code 9"
has_line noslot "replication slot \"outbox_relay\" does not exist and --no-create-slot is set: create it with SELECT pg_create_logical_replication_slot('outbox_relay', '$PLUGIN')" \
	"--no-create-slot without the slot is a problem, naming the plugin"
if [ "$PLUGIN" = pgoutput ]; then
	has_line noslot "publication \"outbox_relay\" does not exist: run CREATE PUBLICATION \"outbox_relay\" FOR TABLE \"public\".\"outbox\" WITH (publish = 'insert') before creating the slot" \
		"--no-create-slot, pgoutput: the missing publication is a problem, with the SQL"
fi

# ---------------------------------------------------------------------------
# 4. All good: exit 0, and nothing left behind.
# ---------------------------------------------------------------------------
check good --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" "${PLUGIN_ARGS[@]}"
assert_eq 0 "$RC" "all good: exit code 0 [$OUT]"
assert_contains "$OUT" "0 problem(s) found" "all good: 0 problem(s) found"
assert_contains "$OUT" "configuration OK" "all good: configuration OK"
has_line good "$PLUGIN loads as an output plugin" "all good: $PLUGIN was checked" ok
has_line good "replication slot \"outbox_relay\" does not exist: the relay will create it ($PLUGIN)" "all good: the slot is missing, will be created" ok
if [ "$PLUGIN" = wal2json ]; then
	assert_not_contains "$OUT" "pgoutput loads" "all good, wal2json: pgoutput is not what was checked"
	assert_not_contains "$OUT" "publication" "all good, wal2json: no publication check"
fi
assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_replication_slots")" "all good: no slot left behind (the temporary one is gone)"
assert_eq 0 "$(redis_cli DBSIZE)" "all good: no Redis key"
assert_eq "" "$(redis_cli FUNCTION LIST)" "all good: no Redis function loaded"

# ---------------------------------------------------------------------------
# 5. The plugin: an existing slot's decides, else --plugin; pgoutput checks
#    the publication (made by the relay when missing, if the role may).
# ---------------------------------------------------------------------------
PUB_SQL="CREATE PUBLICATION \"outbox_relay\" FOR TABLE \"public\".\"outbox\" WITH (publish = 'insert')"
check pgo_new --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --plugin pgoutput
assert_eq 0 "$RC" "--plugin pgoutput, nothing made yet: exit code 0 [$OUT]"
has_line pgo_new "pgoutput loads as an output plugin" "--plugin pgoutput: pgoutput was checked (temporary slot)" ok
has_line pgo_new 'replication slot "outbox_relay" does not exist: the relay will create it (pgoutput)' \
	"--plugin pgoutput: the slot will be created with pgoutput" ok
has_line pgo_new "publication \"outbox_relay\" does not exist: the relay will create it ($PUB_SQL) before the slot" \
	"--plugin pgoutput: the publication (the slot's name) will be created" ok
assert_not_contains "$OUT" "wal2json loads" "--plugin pgoutput: wal2json is not checked"
assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_replication_slots")" "--plugin pgoutput: no slot left behind"
assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_publication")" "--plugin pgoutput: no publication created"

# A role that does not own the outbox table may not create the publication.
psql_q "CREATE ROLE relayer LOGIN REPLICATION"
check pgo_noown --pg-dsn "host=$T port=$PGPORT user=relayer dbname=postgres" --redis-url "$REDIS_URL" --plugin pgoutput
assert_eq 9 "$RC" "--plugin pgoutput, a role that may not create the publication: exit code 9"
has_line pgo_noown 'publication "outbox_relay" does not exist and user relayer may not create it' \
	"a role that may not create the publication: a problem"
has_line pgo_noown "run $PUB_SQL; as the table's owner" "... giving the CREATE PUBLICATION to run"
assert_contains "$OUT" "1 problem(s) found" "a role that may not create the publication: 1 problem(s) found"

# An existing pgoutput slot, checked without --plugin: the slot's plugin decides.
slot_create s_pgo pgoutput
check pgo_slot --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --slot s_pgo
assert_eq 0 "$RC" "existing pgoutput slot without --plugin: exit code 0 [$OUT]"
has_line pgo_slot 'replication slot "s_pgo" exists (pgoutput, database postgres, confirmed up to ' \
	"existing pgoutput slot: the slot uses pgoutput, said so" ok
has_line pgo_slot "pgoutput loads as an output plugin" "existing pgoutput slot: pgoutput was checked, not wal2json" ok
has_line pgo_slot 'publication "s_pgo" publishes the inserts of the outbox table "public"."outbox"' \
	"existing pgoutput slot: its publication (the slot's name) covers the table" ok
# Its publication gone: the relay refuses the slot.
psql_q 'DROP PUBLICATION s_pgo'
check pgo_nopub --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --slot s_pgo
assert_eq 9 "$RC" "existing pgoutput slot without its publication: exit code 9"
has_line pgo_nopub 'publication "s_pgo" does not exist, and slot "s_pgo" does: pgoutput reads a publication as of each change it decodes' \
	"existing pgoutput slot without its publication: a problem, the relay's wording"
assert_contains "$OUT" "1 problem(s) found" "existing pgoutput slot without its publication: 1 problem(s) found"
assert_eq 0 "$(psql_q "SELECT count(*) FROM pg_publication")" "existing pgoutput slot: no publication created"
psql_q "SELECT pg_drop_replication_slot('s_pgo')" >/dev/null

# An existing wal2json slot with --plugin pgoutput: wal2json is what the relay uses.
slot_create s_w2j wal2json
check w2j_slot --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --slot s_w2j --plugin pgoutput
assert_eq 0 "$RC" "existing wal2json slot, --plugin pgoutput: exit code 0 [$OUT]"
has_line w2j_slot 'replication slot "s_w2j" exists (wal2json, database postgres' "existing wal2json slot: said so" ok
has_line w2j_slot "wal2json loads as an output plugin" "existing wal2json slot: wal2json was checked" ok
assert_not_contains "$OUT" "publication" "existing wal2json slot: no publication check"
psql_q "SELECT pg_drop_replication_slot('s_w2j')" >/dev/null

# A publication that leaves out the outbox table, or does not publish inserts.
psql_q "CREATE TABLE other_tbl (id int); CREATE PUBLICATION p FOR TABLE other_tbl"
check pgo_other --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --plugin pgoutput --publication p
assert_eq 9 "$RC" "a publication without the outbox table: exit code 9"
has_line pgo_other 'publication "p" does not include the outbox table "public"."outbox": run ALTER PUBLICATION "p" ADD TABLE "public"."outbox"' \
	"a publication without the outbox table: a problem naming the ALTER PUBLICATION"
psql_q "CREATE PUBLICATION p2 FOR TABLE public.outbox WITH (publish = 'update')"
check pgo_noins --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL" --plugin pgoutput --publication p2
assert_eq 9 "$RC" "a publication without inserts: exit code 9"
has_line pgo_noins "publication \"p2\" does not publish inserts: run ALTER PUBLICATION \"p2\" SET (publish = 'insert')" \
	"a publication without inserts: a problem naming the ALTER PUBLICATION"
psql_q "DROP PUBLICATION p; DROP PUBLICATION p2; DROP TABLE other_tbl"

# A password that is right passes AUTH.
redis_stop
redis_start --requirepass right-pass
check goodauth --pg-dsn "$PG_DSN" --redis-url "unix://:right-pass@$REDIS_SOCK" "${PLUGIN_ARGS[@]}"
assert_eq 0 "$RC" "right Redis password: exit code 0 [$OUT]"
has_line goodauth "AUTH accepted" "right Redis password: AUTH accepted" ok
assert_not_contains "$OUT" "right-pass" "the Redis password is not printed"
# No password in the URL, but Redis wants one.
check noauth --pg-dsn "$PG_DSN" --redis-url "$REDIS_URL"
assert_eq 9 "$RC" "Redis wants a password the URL lacks: exit code 9"
has_line noauth "COMMAND INFO failed: NOAUTH" "Redis wants a password the URL lacks: a problem naming NOAUTH"
assert_contains "$OUT" "1 problem(s) found" "Redis wants a password the URL lacks: 1 problem(s) found"
pass
