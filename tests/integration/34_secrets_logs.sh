#!/bin/bash
# 34_secrets_logs: the "low" findings of issue 14 against the real binaries.
# Every case runs in a subshell, so one failing case does not hide the others.
#
#   cmdline_relay        passwords in --pg-dsn (conninfo) and --redis-url are
#                        gone from /proc/PID/cmdline of a running relay; the
#                        other arguments are still there
#   cmdline_uri          the same for a postgresql:// URI and --redis-url=VALUE
#   cmdline_consume      outbox-consume: the --redis-url password is gone too
#   secret_file_mode     a 0644 --pg-password-file: one warning naming the file
#                        and chmod 600; a 0600 one: no warning
#   redis_user_empty_pw  redis://relay:@... : exit 2, one line naming
#                        --redis-url and the fix (relay, status, outbox-consume);
#                        before, AUTH was skipped and the relay ran as "default"
#   log_forging          an outbox id "x\nFAKE error: ..." with --id-format uuid:
#                        the dead-letter warning stays one line, the newline is
#                        written as \n, no log line starts with "FAKE"
. "$(dirname "$0")/lib.sh"
setup_tmp
need_consume_bin

# No servers for the first cases: the processes retry and stay up.
NOPG="host=$T/nowhere port=1 dbname=x user=relay connect_timeout=2"
NORED="$T/nowhere.sock"

# start_bg LOG BIN ARGS...: start BIN in the background (pid in BG_PID).
start_bg() {
	local out=$1
	shift
	"$@" >"$out" 2>&1 </dev/null &
	BG_PID=$!
	echo "$BG_PID" >>"$T/relay.pids"
}

# stop_bg: kill the background process and wait for it.
stop_bg() {
	kill -TERM "$BG_PID" 2>/dev/null || true
	wait_for "! pid_alive $BG_PID" 10 || kill -9 "$BG_PID" 2>/dev/null || true
	wait "$BG_PID" 2>/dev/null || true
}

# cmdline_of PID: its /proc/PID/cmdline with the NULs as spaces, once it has
# logged a first line (so it is past parsing its options).
cmdline_of() {
	local pid=$1 out=$2
	wait_for "[ -s '$out' ]" 10 || fail "pid $pid logged nothing within 10 s"
	pid_alive "$pid" || fail "pid $pid exited: $(head -c 600 "$out")"
	tr '\0' ' ' <"/proc/$pid/cmdline"
}

case_cmdline_relay() {
	local cl
	start_bg "$T/cmd1.log" "$RELAY_BIN" --pg-dsn "$NOPG password=hunter2-dsn-37" \
		--redis-url "unix://relay:hunter2-url-37@$NORED" --http-addr "" --log-level debug --slot s37
	cl=$(cmdline_of "$BG_PID" "$T/cmd1.log")
	stop_bg
	log "cmdline: $cl"
	assert_not_contains "$cl" hunter2-dsn-37 "relay: --pg-dsn password not in /proc/PID/cmdline"
	assert_not_contains "$cl" hunter2-url-37 "relay: --redis-url password not in /proc/PID/cmdline"
	assert_contains "$cl" "--pg-dsn host=$T/nowhere port=1 dbname=x user=relay connect_timeout=2 password=***" "relay: the DSN is shown without its password"
	assert_contains "$cl" "--redis-url unix://relay:***@$NORED" "relay: the URL is shown without its password"
	assert_contains "$cl" "--slot s37" "relay: other arguments untouched"
	assert_not_contains "$(cat "$T/cmd1.log")" hunter2 "relay: no password in the log"
}
run_case cmdline_relay case_cmdline_relay

case_cmdline_uri() {
	local cl
	start_bg "$T/cmd2.log" "$RELAY_BIN" --pg-dsn "postgresql://relay:hunter2-uri-37@localhost:1/x?host=$T/nowhere&connect_timeout=2" \
		--redis-url="redis-cluster://relay:hunter2-url2-37@127.0.0.1:1" --http-addr "" --log-level debug
	cl=$(cmdline_of "$BG_PID" "$T/cmd2.log")
	stop_bg
	log "cmdline: $cl"
	assert_not_contains "$cl" hunter2-uri-37 "relay: URI password not in /proc/PID/cmdline"
	assert_not_contains "$cl" hunter2-url2-37 "relay: --redis-url=VALUE password not in /proc/PID/cmdline"
	assert_contains "$cl" "postgresql://relay:***@localhost:1/x" "relay: the URI is shown without its password"
	assert_contains "$cl" "--redis-url=redis-cluster://relay:***@127.0.0.1:1" "relay: the URL is shown without its password"
}
run_case cmdline_uri case_cmdline_uri

case_cmdline_consume() {
	local cl
	start_bg "$T/cmd3.log" "$CONSUME_BIN" --redis-url "unix://:hunter2-consume-37@$NORED" --group g --stream s
	cl=$(cmdline_of "$BG_PID" "$T/cmd3.log")
	stop_bg
	log "cmdline: $cl"
	assert_not_contains "$cl" hunter2-consume-37 "outbox-consume: --redis-url password not in /proc/PID/cmdline"
	assert_contains "$cl" "--redis-url unix://:***@$NORED" "outbox-consume: the URL is shown without its password"
}
run_case cmdline_consume case_cmdline_consume

case_secret_file_mode() {
	local warns
	printf 'filepw-37\n' >"$T/pw644"
	chmod 644 "$T/pw644"
	printf 'filepw-37\n' >"$T/pw600"
	chmod 600 "$T/pw600"
	RC=0
	"$RELAY_BIN" --pg-dsn "$NOPG" --redis-url "$NORED" --pg-password-file "$T/pw644" --check-config-offline \
		>"$T/mode644.out" 2>"$T/mode644.err" </dev/null || RC=$?
	assert_eq 0 "$RC" "--check-config-offline with a 0644 password file: exit code"
	warns=$(grep ' warn: ' "$T/mode644.err" || true)
	assert_eq 1 "$(printf '%s' "$warns" | grep -c . || true)" "0644 password file: one warning [$(head -c 600 "$T/mode644.err")]"
	assert_contains "$warns" "--pg-password-file \"$T/pw644\"" "the warning names the option and the file"
	assert_contains "$warns" "chmod 600" "the warning gives the fix"
	assert_not_contains "$(cat "$T/mode644.err" "$T/mode644.out")" filepw-37 "no password printed"
	RC=0
	"$RELAY_BIN" --pg-dsn "$NOPG" --redis-url "$NORED" --redis-password-file "$T/pw600" --check-config-offline \
		>"$T/mode600.out" 2>"$T/mode600.err" </dev/null || RC=$?
	assert_eq 0 "$RC" "--check-config-offline with a 0600 password file: exit code"
	assert_eq "" "$(cat "$T/mode600.err")" "0600 password file: no warning"
}
run_case secret_file_mode case_secret_file_mode

case_redis_user_empty_pw() {
	local name bin err
	for name in relay status consume; do
		RC=0
		case $name in
		relay) timeout -k 2 10 "$RELAY_BIN" --pg-dsn "$NOPG" --redis-url "unix://relay:@$NORED" --http-addr "" >"$T/up.$name" 2>&1 </dev/null || RC=$? ;;
		status) timeout -k 2 10 "$RELAY_BIN" status --pg-dsn "$NOPG" --redis-url "unix://relay:@$NORED" --http-addr "" >"$T/up.$name" 2>&1 </dev/null || RC=$? ;;
		consume) timeout -k 2 10 "$CONSUME_BIN" --redis-url "unix://relay:@$NORED" --group g --stream s >"$T/up.$name" 2>&1 </dev/null || RC=$? ;;
		esac
		err=$(cat "$T/up.$name")
		assert_eq 2 "$RC" "$name: redis://relay:@ exit code [${err:0:600}]"
		assert_eq 1 "$(grep -c . "$T/up.$name")" "$name: one line"
		assert_contains "$err" "--redis-url names a user but its password is empty" "$name: says what is wrong"
		assert_contains "$err" "--redis-password-file" "$name: gives the fix"
	done
	bin=$RELAY_BIN
	RC=0
	printf 'pw\n' >"$T/pwu"
	chmod 600 "$T/pwu"
	"$bin" --pg-dsn "$NOPG" --redis-url "unix://relay:@$NORED" --redis-password-file "$T/pwu" --check-config-offline \
		>"$T/up.file" 2>&1 </dev/null || RC=$?
	assert_eq 0 "$RC" "redis://relay:@ with --redis-password-file is valid [$(head -c 400 "$T/up.file")]"
}
run_case redis_user_empty_pw case_redis_user_empty_pw

# ---------------------------------------------------------------------------
# With servers.

pg_start
load_schema
redis_start
psql_q "CREATE TABLE public.outbox_forge (id text, aggregate_type text, aggregate_id text, event_type text,
                                          payload jsonb, headers jsonb)"
slot_create outbox_relay

case_log_forging() {
	local good forged
	psql_q "INSERT INTO public.outbox_forge (id, aggregate_type, aggregate_id, event_type, payload)
	        VALUES (E'x\\nFAKE error: forged by a row 37\\r\\u001b[2J', 'order', 'forge', 'created', '{}')" >/dev/null
	good=$(psql_q "INSERT INTO public.outbox_forge (id, aggregate_type, aggregate_id, event_type, payload)
	               VALUES (gen_random_uuid()::text, 'order', 'good', 'created', '{}') RETURNING id")
	relay_drain --table public.outbox_forge --id-format uuid
	forged=$(grep -c 'FAKE' "$RELAY_LOG" || true)
	assert_eq 1 "$forged" "the forged text is on exactly one log line"
	assert_eq 0 "$(grep -c '^FAKE' "$RELAY_LOG" || true)" "no log line starts with the forged text"
	assert_contains "$(grep ' warn: dead-lettering' "$RELAY_LOG")" 'event id "x\nFAKE error: forged by a row 37\r\x1b[2J" is not a uuid' \
		"the dead-letter warning shows the id escaped"
	assert_eq 0 "$(tr -d '\n' <"$RELAY_LOG" | tr -cd '\r\033' | wc -c)" "no CR or ESC byte in the log"
	assert_eq 1 "$(rx fields outbox:dead-letter raw | grep -c 'forged by a row 37')" "the row is dead-lettered"
	assert_eq "$good" "$(rx fields outbox:order id)" "the next event is published"
}
run_case log_forging case_log_forging

log "cases passed: ${#CASES_OK[@]}: ${CASES_OK[*]}"
if [ "${#CASES_FAILED[@]}" -gt 0 ]; then
	fail "${#CASES_FAILED[@]} case(s) failed: ${CASES_FAILED[*]}"
fi
pass
