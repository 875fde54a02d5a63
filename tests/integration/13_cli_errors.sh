#!/bin/bash
# 13_cli_errors: bad configuration exits 2 with one line on stderr naming the
# option; --help exits 0 and documents the environment variables. No servers.
. "$(dirname "$0")/lib.sh"
setup_tmp

DSN="host=$T/nowhere port=1 dbname=x connect_timeout=2"
URL="unix://$T/nowhere.sock"

# cli NAME ARGS...: run the relay (at most 10 s) with a clean environment;
# sets RC, OUT, ERR.
cli() {
	local name=$1
	shift
	RC=0
	env -u OUTBOX_RELAY_PG_DSN -u OUTBOX_RELAY_REDIS_URL timeout -k 2 10 "$RELAY_BIN" "$@" \
		>"$T/$name.out" 2>"$T/$name.err" </dev/null || RC=$?
	OUT=$(cat "$T/$name.out")
	ERR=$(cat "$T/$name.err")
}

cli dedup --pg-dsn "$DSN" --redis-url "$URL" --dedup-window abc
assert_eq 2 "$RC" "--dedup-window abc: exit code"
assert_eq 1 "$(grep -c . "$T/dedup.err")" "--dedup-window abc: exactly one stderr line [$ERR]"
assert_contains "$ERR" "--dedup-window" "--dedup-window abc: message names the option"
assert_contains "$ERR" "abc" "--dedup-window abc: message quotes the value"

cli dedupneg --pg-dsn "$DSN" --redis-url "$URL" --dedup-window -5
assert_eq 2 "$RC" "--dedup-window -5: exit code"

cli unknown --pg-dsn "$DSN" --redis-url "$URL" --no-such-flag
assert_eq 2 "$RC" "unknown flag: exit code"
assert_contains "$ERR" "--no-such-flag" "unknown flag: message names it"

cli missingdsn --redis-url "$URL"
assert_eq 2 "$RC" "missing --pg-dsn: exit code"
assert_contains "$ERR" "pg-dsn" "missing --pg-dsn: message names it"

cli missingval --pg-dsn
assert_eq 2 "$RC" "--pg-dsn without a value: exit code"

cli badurl --pg-dsn "$DSN" --redis-url "ftp://example"
assert_eq 2 "$RC" "--redis-url ftp://example: exit code"
assert_contains "$ERR" "redis-url" "bad --redis-url: message names the option"

cli badlevel --pg-dsn "$DSN" --redis-url "$URL" --log-level loud
assert_eq 2 "$RC" "--log-level loud: exit code"

cli badendpos --pg-dsn "$DSN" --redis-url "$URL" --endpos nonsense
assert_eq 2 "$RC" "--endpos nonsense: exit code"

# --dead-letter-stream must be a usable stream name: with "}" outside a tag the
# relay used to start, then exit with "out of memory" at the first dead letter
# (and crash-loop under a supervisor); a control byte would corrupt /metrics.
cli dlbrace --pg-dsn "$DSN" --redis-url "$URL" --dead-letter-stream 'dl}x'
assert_eq 2 "$RC" "--dead-letter-stream 'dl}x': exit code"
assert_eq 1 "$(grep -c . "$T/dlbrace.err")" "--dead-letter-stream 'dl}x': exactly one stderr line [$ERR]"
assert_contains "$ERR" "--dead-letter-stream" "--dead-letter-stream 'dl}x': message names the option"
assert_contains "$ERR" 'outside a {hash tag}' "--dead-letter-stream 'dl}x': message says what is wrong"
assert_contains "$ERR" 'e.g. outbox:{dead-letter}' "--dead-letter-stream 'dl}x': message shows the fix"
cli dlctrl --pg-dsn "$DSN" --redis-url "$URL" --dead-letter-stream "$(printf 'dl\tx')"
assert_eq 2 "$RC" "--dead-letter-stream with a tab: exit code"
assert_eq 1 "$(grep -c . "$T/dlctrl.err")" "--dead-letter-stream with a tab: exactly one stderr line [$ERR]"
assert_contains "$ERR" "--dead-letter-stream: the stream name contains a control byte" "--dead-letter-stream with a tab: message says why"
cli dlempty --pg-dsn "$DSN" --redis-url "$URL" --dead-letter-stream ''
assert_eq 2 "$RC" "--dead-letter-stream '': exit code"
assert_contains "$ERR" "--dead-letter-stream: must not be empty" "--dead-letter-stream '': message says why"

# --message-prefix goes to wal2json's add-msg-prefixes, a list it splits at commas and white
# space (a backslash escapes): 'outbox,audit' published the messages of "outbox" and of
# "audit" and none of "outbox,audit" (pgoutput: only the exact prefix). Refused.
for v in 'outbox,audit' 'out box' 'out\box' "$(printf 'out\tbox')"; do
	cli msgprefix --pg-dsn "$DSN" --redis-url "$URL" --message-prefix "$v"
	assert_eq 2 "$RC" "--message-prefix '$v': exit code"
	assert_eq 1 "$(grep -c . "$T/msgprefix.err")" "--message-prefix '$v': exactly one stderr line [$ERR]"
	assert_contains "$ERR" "--message-prefix" "--message-prefix '$v': message names the option"
	assert_contains "$ERR" "must not contain a comma, a backslash or white space" "--message-prefix '$v': message says why"
	assert_contains "$ERR" "e.g. outbox" "--message-prefix '$v': message shows the fix"
done
cli msgprefixok --pg-dsn "$DSN" --redis-url "$URL" --message-prefix 'out.box:v2-{x}' --check-config-offline
assert_eq 0 "$RC" "--message-prefix with dots, colons, dashes and braces: accepted [$ERR]"

# The environment is configuration too: a bad value there is also exit 2.
RC=0
env OUTBOX_RELAY_PG_DSN="$DSN" OUTBOX_RELAY_DEDUP_WINDOW=abc timeout -k 2 10 "$RELAY_BIN" --redis-url "$URL" \
	>"$T/env.out" 2>"$T/env.err" </dev/null || RC=$?
assert_eq 2 "$RC" "OUTBOX_RELAY_DEDUP_WINDOW=abc: exit code"

cli help --help
assert_eq 0 "$RC" "--help: exit code"
assert_contains "$OUT" "OUTBOX_RELAY_PG_DSN" "--help lists OUTBOX_RELAY_PG_DSN"
for opt in --pg-dsn --slot --table --redis-url --stream --dead-letter-stream --dedup-window --group --endpos --no-redis-functions; do
	assert_contains "$OUT" "$opt" "--help lists $opt"
done
assert_eq "" "$ERR" "--help writes nothing to stderr"

# A valid configuration gets past parsing: the error is about connecting, not usage.
cli noserver --pg-dsn "$DSN" --redis-url "$URL"
assert_ne 2 "$RC" "valid flags but no servers: not a usage error"
assert_ne 0 "$RC" "valid flags but no servers: not success"
log "no servers: exit code $RC"
pass
