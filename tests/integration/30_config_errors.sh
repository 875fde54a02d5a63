#!/bin/bash
# 30_config_errors: bad configuration and bad environments. A permanent
# problem stops the relay with its documented exit code and ONE error line
# that names the problem and the fix, never a password, and leaves nothing
# behind (no replication slot, no Redis key). A transient one (PostgreSQL or
# Redis unreachable) is retried with backoff, logged once, and the relay
# streams as soon as the server is there.
#
# 13_cli_errors covers other flag/variable errors without servers, 16_setup_errors
# and 05_slot the plain exit codes of some cases below; these add the message,
# the hint, the secrets and the "nothing created" checks. Every case runs in a
# subshell, so one failing case does not hide the others; the test fails at
# the end with the list of failed cases.
#
#   unknown_flag_secret     --pg-dsnn=...password=...        2, names the flag, --help, no password
#   dsn_unparsable          URI with an unclosed [           2, names --pg-dsn, no password
#   dsn_bad_port            port=notaport in --pg-dsn        2, names port, no password
#   stream_unclosed         --stream 'outbox:{'              2, write {column}
#   maxlen_negative         --maxlen -1                      2
#   inflight_events_zero    --max-inflight-events 0          2
#   status_interval_10ms    --status-interval 10ms           2
#   dedup_window_500ms      --dedup-window 500ms             2
#   inflight_bytes_1        --max-inflight-bytes 1           2
#   env_maxlen_negative     OUTBOX_RELAY_MAXLEN=-1           2, names the variable
#   trim_unknown            --trim all                       2, expected none or acked
#   trim_interval_10ms      --trim-interval 10ms             2
#   env_trim_unknown        OUTBOX_RELAY_TRIM=yes            2, names the variable
#   pg_password_file_missing --pg-password-file /missing     2
#   http_addr_in_use        --http-addr on a bound port      2, Address already in use
#   pg_wrong_password       scram, wrong password in DSN     3, password authentication failed + hint
#   pg_wrong_password_file  wrong password in the file       3, no password; right one streams
#   no_replication_role     role without REPLICATION         3, ALTER ROLE ... REPLICATION
#   outbox_table_missing    --table public.no_outbox         6, sql/outbox.sql
#   id_column_missing       --id-column nope                 6
#   stream_column_missing   --stream 'outbox:{nope}'         6
#   slot_other_plugin       slot of test_decoding            4, pg_drop_replication_slot, slot untouched
#   wal_level_replica       wal_level=replica                3, wal_level = logical
#   wal2json_not_installed  dynamic_library_path=/nonexistent 3, postgresql-15-wal2json
#   wal2json_not_allowed    output_plugin_libraries without it 3, the exact line to add
#   wal2json_not_allowed_existing_slot  same, slot already there (START_REPLICATION) 3
#   slots_exhausted         max_replication_slots=1, one used 4, max_replication_slots
#   redis_wrong_password    requirepass, wrong password in the URL 5, no password, names the option
#   redis_wrong_password_file  the same from --redis-password-file
#   redis_no_xadd           XADD renamed away                5, XADD, Redis 5 or newer
#   redis_no_functions      FUNCTION renamed away            EVALSHA fallback, exactly once
#   redis_unreachable       no server at the socket          retries, one warning, then delivers
#   pg_unreachable          no server in the socket dir      retries, one warning, then streams
RELAY_TIMEOUT=${RELAY_TIMEOUT:-30}
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start

NOT_APPLICABLE=()

# slots: the replication slots, "name:plugin" comma-separated.
slots() { psql_q "SELECT coalesce(string_agg(slot_name || ':' || plugin, ',' ORDER BY slot_name), '') FROM pg_replication_slots"; }

# keys: every Redis key, sorted, space-separated.
keys() { redis_cli --scan | sort | tr '\n' ' ' | sed 's/ $//'; }

# expect_exit CODE WHAT FRAGMENT...: the last relay_run exited with CODE and
# logged exactly one error line (a configuration error is "outbox-relay: ..."
# on stderr, a runtime one a log line at level error) containing every FRAGMENT.
expect_exit() {
	local code=$1 what=$2 errs n f
	shift 2
	assert_eq "$code" "$RELAY_RC" "$what: exit code"
	errs=$(grep -E '^outbox-relay: | error: ' "$RELAY_LOG" || true)
	n=$(printf '%s' "$errs" | grep -c . || true)
	assert_eq 1 "$n" "$what: exactly one error line [${errs:0:600}]"
	for f; do
		assert_contains "$errs" "$f" "$what: the error line says"
	done
}

# expect_config_error WHAT FRAGMENT...: exit 2 with a single line of output in all.
expect_config_error() {
	expect_exit 2 "$@"
	assert_eq 1 "$(grep -c . "$RELAY_LOG")" "$1: nothing else printed"
}

# expect_nothing_created WHAT SLOTS_BEFORE KEYS_BEFORE
expect_nothing_created() {
	assert_eq "$2" "$(slots)" "$1: no replication slot created or changed"
	assert_eq "$3" "$(keys)" "$1: no Redis key created"
}

# expect_no_secret WHAT SECRET: the secret appears nowhere in the output.
expect_no_secret() {
	assert_not_contains "$(cat "$RELAY_LOG")" "$2" "$1: output does not reveal the password"
}

# with_dsn DSN ARGS...: relay_run with another --pg-dsn (flags: the last one wins).
with_dsn() {
	local dsn=$1
	shift
	relay_run --pg-dsn "$dsn" "$@" || true
}

# ---------------------------------------------------------------------------
# 1. Invalid flags, variables and values: exit 2 before touching anything.
# ---------------------------------------------------------------------------

S0=$(slots)
K0=$(keys)

case_unknown_flag_secret() {
	relay_run "--pg-dsnn=host=db user=relay password=hunter2-flag" || true
	expect_config_error "misspelled flag with a secret value" '"--pg-dsnn"' "--help"
	expect_no_secret "misspelled flag" hunter2-flag
	expect_nothing_created "misspelled flag" "$S0" "$K0"
}
run_case unknown_flag_secret case_unknown_flag_secret

case_dsn_unparsable() {
	with_dsn "postgresql://relay:hunter2-uri@[::1/postgres"
	expect_config_error "unparsable --pg-dsn URI" "--pg-dsn"
	expect_no_secret "unparsable --pg-dsn URI" hunter2-uri
	expect_nothing_created "unparsable --pg-dsn URI" "$S0" "$K0"
}
run_case dsn_unparsable case_dsn_unparsable

# libpq parses "port=notaport" and refuses it only when connecting; no retry
# can fix it, so it is a configuration error like any other (exit 2), not a
# reason to retry forever.
case_dsn_bad_port() {
	RELAY_TIMEOUT=10 with_dsn "host=$T port=notaport user=postgres dbname=postgres password=hunter2-port"
	expect_no_secret "--pg-dsn with port=notaport" hunter2-port
	expect_nothing_created "--pg-dsn with port=notaport" "$S0" "$K0"
	expect_exit 2 "--pg-dsn with port=notaport" "port" "--pg-dsn"
}
run_case dsn_bad_port case_dsn_bad_port

case_stream_unclosed() {
	relay_run --stream 'outbox:{' || true
	expect_exit 2 "--stream 'outbox:{'" "--stream" "unclosed" "write {column}"
	assert_not_contains "$(cat "$RELAY_LOG")" "connected to Redis" "--stream 'outbox:{': rejected before connecting"
	expect_nothing_created "--stream 'outbox:{'" "$S0" "$K0"
}
run_case stream_unclosed case_stream_unclosed

# numeric NAME FLAG VALUE FRAGMENT
numeric() {
	relay_run "$2" "$3" || true
	expect_config_error "$2 $3" "$2" "\"$3\"" "$4"
	expect_nothing_created "$2 $3" "$S0" "$K0"
}
run_case maxlen_negative numeric maxlen --maxlen -1 "must be between 0 and"
run_case inflight_events_zero numeric inflight --max-inflight-events 0 "must be between 1 and"
run_case status_interval_10ms numeric status --status-interval 10ms "must be between 100ms and"
run_case dedup_window_500ms numeric dedup --dedup-window 500ms "whole number of seconds"
run_case inflight_bytes_1 numeric bytes --max-inflight-bytes 1 "must be between 64KiB and"

case_env_maxlen_negative() {
	OUTBOX_RELAY_MAXLEN=-1 relay_run || true
	expect_config_error "OUTBOX_RELAY_MAXLEN=-1" "OUTBOX_RELAY_MAXLEN" '"-1"' "must be between 0 and"
	expect_nothing_created "OUTBOX_RELAY_MAXLEN=-1" "$S0" "$K0"
}
run_case env_maxlen_negative case_env_maxlen_negative
run_case trim_unknown numeric trim --trim all "expected none or acked"
run_case trim_interval_10ms numeric trimint --trim-interval 10ms "must be between 100ms and"

case_env_trim_unknown() {
	OUTBOX_RELAY_TRIM=yes relay_run || true
	expect_config_error "OUTBOX_RELAY_TRIM=yes" "OUTBOX_RELAY_TRIM" '"yes"' "expected none or acked"
	expect_nothing_created "OUTBOX_RELAY_TRIM=yes" "$S0" "$K0"
}
run_case env_trim_unknown case_env_trim_unknown

case_pg_password_file_missing() {
	relay_run --pg-password-file "$T/no-such-secret" || true
	expect_config_error "--pg-password-file missing" "--pg-password-file" "$T/no-such-secret" "No such file"
	expect_nothing_created "--pg-password-file missing" "$S0" "$K0"
}
run_case pg_password_file_missing case_pg_password_file_missing

case_http_addr_in_use() {
	local port lpid
	# A listener of our own on a free port; it exits by itself after 60 s.
	python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$T/port" &
	lpid=$!
	wait_for "[ -s '$T/port' ]" 10 || fail "listener did not start"
	port=$(cat "$T/port")
	relay_run --http-addr "127.0.0.1:$port" || true
	kill "$lpid" 2>/dev/null || true
	wait "$lpid" 2>/dev/null || true
	expect_exit 2 "--http-addr on a port in use" "127.0.0.1:$port" "Address already in use" "--http-addr"
	expect_nothing_created "--http-addr on a port in use" "$S0" "$K0"
}
run_case http_addr_in_use case_http_addr_in_use

# ---------------------------------------------------------------------------
# 2. PostgreSQL refuses us: authentication, privileges, the outbox schema, slots.
# ---------------------------------------------------------------------------

psql_q "CREATE ROLE pwuser LOGIN REPLICATION PASSWORD 'right-pw-30'; CREATE ROLE norepl LOGIN"
# Password authentication for pwuser, before the trust lines (first match wins).
sed -i '1i local all pwuser scram-sha-256' "$PGDATA/pg_hba.conf"
psql_q "SELECT pg_reload_conf()" >/dev/null
PWDSN="host=$T port=$PGPORT user=pwuser dbname=postgres"

case_pg_wrong_password() {
	local s0 k0
	s0=$(slots) k0=$(keys)
	with_dsn "$PWDSN password=wrong-pw-30dsn" --slot s_pw
	expect_exit 3 "wrong PostgreSQL password in --pg-dsn" "password authentication failed" \
		"check the user and password in --pg-dsn"
	expect_no_secret "wrong PostgreSQL password in --pg-dsn" wrong-pw-30dsn
	expect_no_secret "wrong PostgreSQL password in --pg-dsn" right-pw-30
	expect_nothing_created "wrong PostgreSQL password in --pg-dsn" "$s0" "$k0"
}
run_case pg_wrong_password case_pg_wrong_password

case_pg_wrong_password_file() {
	local s0 k0
	s0=$(slots) k0=$(keys)
	echo wrong-pw-30file >"$T/pgpw"
	with_dsn "$PWDSN password=right-pw-30" --pg-password-file "$T/pgpw" --slot s_pw
	expect_exit 3 "wrong PostgreSQL password in --pg-password-file (it overrides the DSN's)" \
		"password authentication failed"
	expect_no_secret "wrong PostgreSQL password in --pg-password-file" wrong-pw-30file
	expect_nothing_created "wrong PostgreSQL password in --pg-password-file" "$s0" "$k0"
	# The right one in the file works (and wins over a wrong one in the DSN).
	echo right-pw-30 >"$T/pgpw"
	RELAY_TIMEOUT=30 with_dsn "$PWDSN password=wrong-pw-30dsn" --pg-password-file "$T/pgpw" --slot s_pw \
		--endpos "$(current_lsn)"
	assert_eq 0 "$RELAY_RC" "right password in --pg-password-file: reaches --endpos"
	expect_no_secret "right password in --pg-password-file" right-pw-30
	psql_q "SELECT pg_drop_replication_slot('s_pw')" >/dev/null
}
run_case pg_wrong_password_file case_pg_wrong_password_file

case_no_replication_role() {
	local s0 k0
	s0=$(slots) k0=$(keys)
	with_dsn "host=$T port=$PGPORT user=norepl dbname=postgres" --slot s_norepl
	# PostgreSQL 16 reworded the server's FATAL ("must be superuser or
	# replication role to start walsender" before).
	if [ "$(pg_version_num)" -ge 160000 ]; then
		expect_exit 3 "role without REPLICATION" "permission denied to start WAL sender" "ALTER ROLE"
	else
		expect_exit 3 "role without REPLICATION" "replication role" "ALTER ROLE"
	fi
	expect_nothing_created "role without REPLICATION" "$s0" "$k0"
}
run_case no_replication_role case_no_replication_role

case_outbox_table_missing() {
	local s0 k0
	s0=$(slots) k0=$(keys)
	relay_run --table public.no_outbox --slot s_notable || true
	expect_exit 6 "--table public.no_outbox" '"public.no_outbox" does not exist' "sql/outbox.sql" "--table"
	expect_nothing_created "--table public.no_outbox" "$s0" "$k0"
}
run_case outbox_table_missing case_outbox_table_missing

case_id_column_missing() {
	local s0 k0
	s0=$(slots) k0=$(keys)
	relay_run --id-column nope --slot s_nocol || true
	expect_exit 6 "--id-column nope" 'column "nope"' "fix --id-column"
	expect_nothing_created "--id-column nope" "$s0" "$k0"
}
run_case id_column_missing case_id_column_missing

case_stream_column_missing() {
	local s0 k0
	s0=$(slots) k0=$(keys)
	relay_run --stream 'outbox:{nope}' --slot s_nocol || true
	expect_exit 6 "--stream 'outbox:{nope}'" 'column "nope"' "fix --stream"
	expect_nothing_created "--stream 'outbox:{nope}'" "$s0" "$k0"
}
run_case stream_column_missing case_stream_column_missing

case_slot_other_plugin() {
	local s0 k0 before
	slot_create s_td test_decoding
	before=$(psql_q "SELECT plugin, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's_td'")
	s0=$(slots) k0=$(keys)
	relay_run --slot s_td || true
	expect_exit 4 "slot of another plugin" 'plugin "test_decoding"' "pg_drop_replication_slot('s_td')"
	expect_nothing_created "slot of another plugin" "$s0" "$k0"
	assert_eq "$before" "$(psql_q "SELECT plugin, confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's_td'")" \
		"slot of another plugin: left as it was"
	psql_q "SELECT pg_drop_replication_slot('s_td')" >/dev/null
}
run_case slot_other_plugin case_slot_other_plugin

# ---------------------------------------------------------------------------
# 3. Server settings: restart PostgreSQL with each, then back to normal.
# ---------------------------------------------------------------------------

drop_all_slots() { psql_q "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots" >/dev/null; }

# pg_with SETTING...: restart PostgreSQL with these -c settings (none: normal).
pg_with() {
	pg_stop fast
	pg_start "$@"
}

drop_all_slots
pg_with wal_level=replica
case_wal_level_replica() {
	local k0
	k0=$(keys)
	assert_eq replica "$(psql_q "SHOW wal_level")" "server runs with wal_level=replica"
	relay_run --slot s_replica || true
	expect_exit 3 "wal_level=replica" "wal_level" "set wal_level = logical in postgresql.conf"
	expect_nothing_created "wal_level=replica" "" "$k0"
}
run_case wal_level_replica case_wal_level_replica

pg_with "dynamic_library_path=/nonexistent"
case_wal2json_not_installed() {
	local k0
	k0=$(keys)
	relay_run --slot s_dlp || true
	expect_exit 3 "wal2json not installed" 'could not access file "wal2json"' "postgresql-15-wal2json"
	expect_nothing_created "wal2json not installed" "" "$k0"
}
run_case wal2json_not_installed case_wal2json_not_installed

# Debian's 15.19+ and 17+ builds only: 15.18 and upstream have no
# output_plugin_libraries (and refuse to start with it set). CI runs this
# test again on a server that has it (.ci/run, PostgreSQL compatibility).
if pg_has_setting output_plugin_libraries; then
	pg_with "output_plugin_libraries=pgoutput,test_decoding"
	case_wal2json_not_allowed() {
		local k0
		k0=$(keys)
		relay_run --slot s_opl || true
		expect_exit 3 "wal2json not in output_plugin_libraries" 'library "wal2json" may not be used as an output plugin' \
			"output_plugin_libraries = 'pgoutput, test_decoding, wal2json'"
		expect_nothing_created "wal2json not in output_plugin_libraries" "" "$k0"
	}
	run_case wal2json_not_allowed case_wal2json_not_allowed

	# The same with a wal2json slot created while the plugin was allowed: now
	# START_REPLICATION is what fails, and the slot keeps its position.
	pg_with
	slot_create s_opl
	pg_with "output_plugin_libraries=pgoutput,test_decoding"
	case_wal2json_not_allowed_existing_slot() {
		local s0 c0 k0
		s0=$(slots) k0=$(keys)
		c0=$(slot_confirmed_lsn s_opl)
		psql_q "SELECT outbox_emit('order', 'opl', 'created', '{}')" >/dev/null
		relay_run --slot s_opl || true
		expect_exit 3 "wal2json not allowed, existing slot" "may not be used as an output plugin" \
			"output_plugin_libraries = 'pgoutput, test_decoding, wal2json'"
		expect_nothing_created "wal2json not allowed, existing slot" "$s0" "$k0"
		assert_eq "$c0" "$(slot_confirmed_lsn s_opl)" "wal2json not allowed, existing slot: confirmed_flush_lsn unchanged"
	}
	run_case wal2json_not_allowed_existing_slot case_wal2json_not_allowed_existing_slot
else
	log "server has no output_plugin_libraries: cases wal2json_not_allowed* do not apply"
	NOT_APPLICABLE+=(wal2json_not_allowed wal2json_not_allowed_existing_slot)
fi

pg_with
drop_all_slots
slot_create s_other
pg_with max_replication_slots=1
case_slots_exhausted() {
	local k0
	k0=$(keys)
	relay_run --slot s_full || true
	expect_exit 4 "max_replication_slots=1, in use" "all replication slots are in use" "max_replication_slots"
	expect_nothing_created "max_replication_slots=1, in use" "s_other:wal2json" "$k0"
}
run_case slots_exhausted case_slots_exhausted

pg_with
drop_all_slots

# ---------------------------------------------------------------------------
# 4. Redis: refuses us, lacks commands, lacks functions, is not there.
# ---------------------------------------------------------------------------

# redis_with ARGS...: restart redis-server with these arguments (none: normal).
redis_with() {
	redis_stop
	redis_start "$@"
}

redis_with --requirepass r3dis-right-30
# The fix is asserted last, so the other checks still report when it is missing.
case_redis_wrong_password() {
	relay_run --redis-url "unix://:r3dis-wrong-30url@$REDIS_SOCK" --slot s_rpw || true
	expect_exit 5 "wrong Redis password in --redis-url" "WRONGPASS"
	expect_no_secret "wrong Redis password in --redis-url" r3dis-wrong-30url
	expect_no_secret "wrong Redis password in --redis-url" r3dis-right-30
	# Redis is checked before PostgreSQL: no slot holds WAL for a relay that cannot publish.
	expect_nothing_created "wrong Redis password in --redis-url" "" ""
	assert_match "$(grep ' error: ' "$RELAY_LOG")" '--redis-(url|password-file)' \
		"wrong Redis password in --redis-url: the error line names the setting to fix"
}
run_case redis_wrong_password case_redis_wrong_password

case_redis_wrong_password_file() {
	echo r3dis-wrong-30file >"$T/redispw"
	relay_run --redis-url "unix://$REDIS_SOCK" --redis-password-file "$T/redispw" --slot s_rpw || true
	expect_exit 5 "wrong Redis password in --redis-password-file" "WRONGPASS"
	expect_no_secret "wrong Redis password in --redis-password-file" r3dis-wrong-30file
	expect_nothing_created "wrong Redis password in --redis-password-file" "" ""
	assert_match "$(grep ' error: ' "$RELAY_LOG")" '--redis-(url|password-file)' \
		"wrong Redis password in --redis-password-file: the error line names the setting to fix"
}
run_case redis_wrong_password_file case_redis_wrong_password_file

redis_with --rename-command XADD ""
case_redis_no_xadd() {
	relay_run --slot s_noxadd || true
	expect_exit 5 "Redis without XADD" "XADD" "Redis 5 or newer"
	expect_nothing_created "Redis without XADD" "" ""
}
run_case redis_no_xadd case_redis_no_xadd

redis_with --rename-command FUNCTION ""
case_redis_no_functions() {
	local a b c
	slot_create s_nofn
	a=$(psql_q "SELECT outbox_emit('order', 'nofn-1', 'created', '{}')")
	b=$(psql_q "SELECT outbox_emit('order', 'nofn-2', 'created', '{}')")
	relay_drain --slot s_nofn --publish function
	assert_eq 0 "$(grep -c ' error: ' "$RELAY_LOG" || true)" "Redis without FUNCTION: no error line"
	c=$(psql_q "SELECT outbox_emit('order', 'nofn-3', 'created', '{}')")
	relay_drain --slot s_nofn --publish function
	assert_eq 0 "$(grep -c ' error: ' "$RELAY_LOG" || true)" "Redis without FUNCTION, second run: no error line"
	printf '%s\n' "$a" "$b" "$c" >"$T/nofn.expected"
	assert_stream_ids outbox:order "$T/nofn.expected"
	assert_match "$(redis_cli INFO commandstats)" 'cmdstat_evalsha:calls=[1-9]' "Redis without FUNCTION: the relay used EVALSHA"
	assert_not_contains "$(redis_cli INFO commandstats)" "cmdstat_fcall:" "Redis without FUNCTION: no FCALL"
	psql_q "SELECT pg_drop_replication_slot('s_nofn')" >/dev/null
}
run_case redis_no_functions case_redis_no_functions

redis_stop
case_redis_unreachable() {
	local id n
	relay_start --slot s_rdown --retry-max 1s --log-level debug
	wait_for "slot_active s_rdown" 20 || fail "the relay did not start streaming from PostgreSQL while Redis is down"
	id=$(psql_q "SELECT outbox_emit('order', 'rdown', 'created', '{}')")
	sleep 3
	relay_alive || fail "the relay exited while Redis is unreachable (it must retry)"
	ok "Redis unreachable: relay alive after 3 s"
	n=$(grep -c ' warn: Redis: .*could not connect' "$RELAY_LOG" || true)
	assert_eq 1 "$n" "Redis unreachable: exactly one warning line (retries are not logged at warn)"
	assert_eq 0 "$(grep -c ' error: ' "$RELAY_LOG" || true)" "Redis unreachable: no error line"
	assert_ge "$(grep -c ' debug: Redis: .*could not connect' "$RELAY_LOG" || true)" 2 "Redis unreachable: retried (debug lines)"
	redis_start
	wait_for "[ \"\$(rx fields outbox:order id 2>/dev/null)\" = '$id' ]" 20 ||
		fail "the event was not delivered after Redis came up"
	ok "Redis back at the same socket: the event committed meanwhile is delivered"
	wait_confirmed s_rdown "$(current_lsn)" 20 || fail "s_rdown: confirmed_flush_lsn does not pass the event"
	relay_stop
	assert_eq 0 "$RELAY_RC" "Redis unreachable: SIGTERM afterwards exits 0"
	printf '%s\n' "$id" >"$T/rdown.expected"
	assert_stream_ids outbox:order "$T/rdown.expected"
	psql_q "SELECT pg_drop_replication_slot('s_rdown')" >/dev/null
}
run_case redis_unreachable case_redis_unreachable
# The case may have started Redis in its subshell: adopt it, or start one.
if [ -s "$T/redis.pid" ] && pid_alive "$(cat "$T/redis.pid")"; then
	REDIS_PID=$(cat "$T/redis.pid")
	REDIS_PASSWORD=
else
	redis_start
fi

# ---------------------------------------------------------------------------
# 5. PostgreSQL is not there: a socket directory with no server.
# ---------------------------------------------------------------------------

pg_stop fast
case_pg_unreachable() {
	local id n
	[ ! -e "$T/.s.PGSQL.$PGPORT" ] || fail "a PostgreSQL socket is still in $T"
	relay_start --slot s_pgdown --retry-max 1s --log-level debug
	sleep 3
	relay_alive || fail "the relay exited while PostgreSQL is unreachable (it must retry)"
	ok "PostgreSQL unreachable: relay alive after 3 s"
	n=$(grep -c ' warn: .*could not connect to PostgreSQL' "$RELAY_LOG" || true)
	assert_eq 1 "$n" "PostgreSQL unreachable: exactly one warning line (retries are not logged at warn)"
	assert_eq 0 "$(grep -c ' error: ' "$RELAY_LOG" || true)" "PostgreSQL unreachable: no error line"
	assert_ge "$(grep -c ' debug: .*could not connect to PostgreSQL' "$RELAY_LOG" || true)" 2 "PostgreSQL unreachable: retried (debug lines)"
	pg_start
	wait_for "slot_active s_pgdown" 20 || fail "the relay did not connect after PostgreSQL started"
	ok "PostgreSQL started in that directory: the relay connected and streams"
	id=$(psql_q "SELECT outbox_emit('order', 'pgdown', 'created', '{}')")
	wait_for "rx fields outbox:order id | grep -qx '$id'" 20 || fail "the event was not delivered"
	ok "an event committed afterwards is delivered"
	relay_stop
	assert_eq 0 "$RELAY_RC" "PostgreSQL unreachable: SIGTERM afterwards exits 0"
}
run_case pg_unreachable case_pg_unreachable

# ---------------------------------------------------------------------------

log "cases passed: ${#CASES_OK[@]}: ${CASES_OK[*]}"
[ "${#NOT_APPLICABLE[@]}" -eq 0 ] || log "cases not applicable to this server: ${NOT_APPLICABLE[*]}"
if [ "${#CASES_FAILED[@]}" -gt 0 ]; then
	fail "${#CASES_FAILED[@]} case(s) failed: ${CASES_FAILED[*]}"
fi
pass
