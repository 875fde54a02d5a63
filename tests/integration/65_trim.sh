#!/bin/bash
# 65_trim: --trim acked trims each stream to what its consumer groups still
# need (issue 11 §4), never further.
#   3000 events on each of four streams; then, with the relay running
#   (--trim acked --trim-interval 1s):
#   outbox:a  groups ga (read and acked 2000) and ga2 (read and acked 1500):
#             trimmed to about entry 1501, the oldest ga2 still needs;
#   outbox:b  group gb read 2000 and acked all but entries 501-1000 (pending):
#             trimmed to about entry 501, the oldest pending one;
#   outbox:c  no group: untouched;
#   outbox:d  group gd that read nothing (last-delivered-id 0-0): untouched.
#   Every entry a group has not been delivered, and every pending one, is
#   still there; XINFO lag stays exact; the Prometheus counters and the one
#   log line per round agree with the entries that left Redis.
#   Then the EVALSHA path (--no-redis-functions, OUTBOX_RELAY_TRIM=acked)
#   trims what the groups acknowledged since, and --trim none (the default)
#   trims nothing. The trim function runs while Redis refuses writes (OOM).
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

N=3000
# py CODE ARGS...: Python with rx.py's client on the test Redis as `r`.
py() {
	local code=$1
	shift
	python3 -c "import sys
sys.path.insert(0, '$TESTS_DIR/integration')
from rx import Client
r = Client(sys.argv[1])
args = sys.argv[2:]
$code" "$REDIS_SOCK" "$@"
}
# consume STREAM GROUP COUNT: XREADGROUP COUNT entries (new ones), print their ids.
consume() {
	py '
rep = r.call("XREADGROUP", "GROUP", args[1], "c1", "COUNT", args[2], "STREAMS", args[0], ">")
for eid, _ in rep[0][1]:
    print(eid.decode() if isinstance(eid, bytes) else eid)' "$@"
}
# ack STREAM GROUP < ids
ack() {
	py '
ids = [l.strip() for l in sys.stdin if l.strip()]
n = 0
for i in range(0, len(ids), 500):
    n += r.call("XACK", args[0], args[1], *ids[i:i + 500])
print(n)' "$@"
}
# needed STREAM: the ids some group of STREAM still needs (undelivered to it,
# or pending), one per line, sorted and unique.
needed() {
	py '
def s(v): return v.decode() if isinstance(v, bytes) else v
def key(i): a, b = i.split("-"); return (int(a), int(b))
key_ = args[0]
out = set()
for g in r.call("XINFO", "GROUPS", key_):
    d = {s(g[i]): g[i + 1] for i in range(0, len(g), 2)}
    name, last = s(d["name"]), s(d["last-delivered-id"])
    for eid, _ in r.xrange(key_):
        if key(s(eid)) > key(last):
            out.add(s(eid))
    for p in r.call("XPENDING", key_, name, "-", "+", 100000):
        out.add(s(p[0]))
for i in sorted(out, key=key): print(i)' "$@"
}
# ids STREAM: every entry id of STREAM, in order.
ids() {
	py '
for eid, _ in r.xrange(args[0]): print(eid.decode() if isinstance(eid, bytes) else eid)' "$@"
}
lag() {
	py '
def s(v): return v.decode() if isinstance(v, bytes) else v
for g in r.call("XINFO", "GROUPS", args[0]):
    d = {s(g[i]): g[i + 1] for i in range(0, len(g), 2)}
    if s(d["name"]) == args[1]: print(d.get("lag"))' "$@"
}

for s in a b d; do
	assert_eq OK "$(redis_cli XGROUP CREATE "outbox:$s" "g$s" 0 MKSTREAM)" "group g$s on outbox:$s"
done
assert_eq OK "$(redis_cli XGROUP CREATE outbox:a ga2 0)" "group ga2 on outbox:a"
for s in a b c d; do
	psql_q "SELECT outbox_emit('$s', 'agg-' || i, 'created', jsonb_build_object('i', i))
	        FROM generate_series(1, $N) i" >/dev/null
done
total=$((4 * N))

relay_start --trim acked --trim-interval 1s --http-addr 127.0.0.1:0 --log-level debug
wait_for "grep -q 'serving /metrics' '$RELAY_LOG'" 10 "the HTTP endpoint" || fail "no HTTP endpoint"
PORT=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$RELAY_LOG" | head -n 1)
wait_confirmed outbox_relay "$(current_lsn)" 60 || fail "events not confirmed"
for s in a b c d; do assert_eq "$N" "$(xlen "outbox:$s")" "outbox:$s has $N entries"; done
# Rounds ran over the published streams and removed nothing: nothing consumed.
wait_for "grep -q 'trim: 4 stream(s) checked' '$RELAY_LOG'" 10 "a trim round over the 4 streams" ||
	fail "no trim round over the four streams: $(grep 'trim' "$RELAY_LOG" | tail -n 3)"
assert_eq 0 "$(metric_value "$PORT" outbox_relay_trimmed_entries_total)" "nothing trimmed before any consumer read"
assert_not_contains "$(cat "$RELAY_LOG")" "entries removed" "no trim line while nothing was removed"

ids outbox:a >"$T/a.all"
ids outbox:b >"$T/b.all"
ids outbox:c >"$T/c.all"
ids outbox:d >"$T/d.all"

# The consumers. ga2 acknowledges 1500, ga 2000; gb reads 2000 and leaves
# 501-1000 pending. All reads in one MULTI, then all acks in another, so
# that one trim round sees all of it.
py '
def s(v): return v.decode() if isinstance(v, bytes) else v
reads = [("outbox:a", "ga", 2000), ("outbox:a", "ga2", 1500), ("outbox:b", "gb", 2000)]
r.call("MULTI")
for k, g, n in reads:
    r.call("XREADGROUP", "GROUP", g, "c1", "COUNT", n, "STREAMS", k, ">")
got = r.call("EXEC")
r.call("MULTI")
for (k, g, n), rep in zip(reads, got):
    ids = [s(e[0]) for e in rep[0][1]]
    assert len(ids) == n, (g, len(ids))
    if g == "gb":
        ids = ids[:500] + ids[1000:]
    r.call("XACK", k, g, *ids)
print(" ".join(str(x) for x in r.call("EXEC")))' >"$T/acked"
assert_eq "2000 1500 1500" "$(cat "$T/acked")" "ga acked 2000, ga2 1500, gb 1500 (in one MULTI)"
needed outbox:a >"$T/a.needed"
needed outbox:b >"$T/b.needed"
assert_eq 1500 "$(wc -l <"$T/a.needed")" "outbox:a: ga2 still needs 1500 entries"
assert_eq 1500 "$(wc -l <"$T/b.needed")" "outbox:b: gb still needs 1000 undelivered + 500 pending"

wait_for "grep -q 'entries removed' '$RELAY_LOG'" 15 "a trim round that removed entries" ||
	fail "no trim line: $(grep 'trim' "$RELAY_LOG" | tail -n 3)"
line=$(grep 'entries removed' "$RELAY_LOG" | head -n 1)
log "$line"
assert_contains "$line" "trim: 2 of 4 stream(s) trimmed" "the trim line names the streams trimmed"
assert_contains "$line" " info" "the trim line is at level info"

la=$(xlen outbox:a)
lb=$(xlen outbox:b)
assert_lt "$la" "$N" "outbox:a was trimmed"
assert_ge "$la" 1500 "outbox:a keeps at least the 1500 entries ga2 needs"
assert_lt "$la" 1600 "outbox:a trimmed to about ga2's position (whole macro nodes)"
assert_lt "$lb" "$N" "outbox:b was trimmed"
assert_ge "$lb" 2500 "outbox:b keeps at least its 500 pending and 1000 undelivered entries"
assert_lt "$lb" 2600 "outbox:b trimmed to about its oldest pending entry"
assert_eq "$N" "$(xlen outbox:c)" "outbox:c (no group) untouched"
assert_eq "$(cat "$T/c.all")" "$(ids outbox:c)" "outbox:c keeps every entry"
assert_eq "$N" "$(xlen outbox:d)" "outbox:d (group at 0-0) untouched"
assert_eq "" "$(ids outbox:a | sort | comm -13 - <(sort "$T/a.needed"))" "outbox:a: every entry a group needs is still there"
assert_eq "" "$(ids outbox:b | sort | comm -13 - <(sort "$T/b.needed"))" "outbox:b: every pending and undelivered entry is still there"
assert_eq "$(sed -n 501p "$T/b.all")" "$(sed -n 1p "$T/b.needed")" "(test) outbox:b's oldest needed entry is the first pending one"
first_b=$(ids outbox:b | sed -n 1p)
assert_contains "$(sed -n '1,501p' "$T/b.all")" "$first_b" "outbox:b's first entry is at or before its oldest pending one"
assert_eq "$(tail -n +"$((N - la + 1))" "$T/a.all")" "$(ids outbox:a)" "outbox:a lost only its oldest entries"
assert_eq 1000 "$(lag outbox:a ga)" "XINFO lag of ga stays exact after the trim"
assert_eq 1000 "$(lag outbox:b gb)" "XINFO lag of gb stays exact after the trim"

removed=$((total - la - lb - 2 * N))
wait_for "[ \"\$(metric_value $PORT outbox_relay_trimmed_entries_total)\" = $removed ]" 5 "the metric" ||
	fail "outbox_relay_trimmed_entries_total is $(metric_value "$PORT" outbox_relay_trimmed_entries_total), not $removed"
sum=$(grep -o '[0-9]* entries removed' "$RELAY_LOG" | awk '{ s += $1 } END { print s }')
assert_eq "$removed" "$sum" "the trim lines add up to the entries that left Redis"
assert_ge "$(metric_value "$PORT" outbox_relay_trim_episodes_total)" 2 "outbox_relay_trim_episodes_total counts rounds"

# More events while trimming; ga2 catches up with ga.
for s in a b; do
	psql_q "SELECT outbox_emit('$s', 'more-' || i, 'created', '{}') FROM generate_series(1, 300) i" >/dev/null
done
wait_confirmed outbox_relay "$(current_lsn)" 60 || fail "more events not confirmed"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code"
consume outbox:a ga2 500 >"$T/ga2.more"
assert_eq 500 "$(ack outbox:a ga2 <"$T/ga2.more")" "ga2 acked 500 more"
needed outbox:a >"$T/a.needed"
needed outbox:b >"$T/b.needed"

# The EVALSHA path, the mode from the environment. A relay trims the streams
# it published to since it started: new events on both.
OUTBOX_RELAY_TRIM=acked relay_start --trim-interval 1s --no-redis-functions
for s in a b; do
	psql_q "SELECT outbox_emit('$s', 'evalsha-' || i, 'created', '{}') FROM generate_series(1, 5) i" >/dev/null
done
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "events not confirmed (EVALSHA)"
wait_for "grep -q 'trim: 1 of 2 stream(s) trimmed' '$RELAY_LOG'" 15 "a trim round through EVALSHA" ||
	fail "no trim line (EVALSHA): $(grep -i 'trim\|error' "$RELAY_LOG" | tail -n 3 || true)"
relay_stop
# ga and ga2 both read 2000 of the first 3000: 1000 + 300 + 5 entries left to read.
assert_lt "$(xlen outbox:a)" 1405 "outbox:a trimmed to about ga2's new position (EVALSHA)"
assert_ge "$(xlen outbox:a)" 1305 "outbox:a keeps what ga and ga2 have not read (EVALSHA)"
assert_eq "" "$(ids outbox:a | sort | comm -13 - <(sort "$T/a.needed"))" "outbox:a: every needed entry is still there (EVALSHA)"
assert_eq "" "$(ids outbox:b | sort | comm -13 - <(needed outbox:b | sort))" "outbox:b: every needed entry is still there (EVALSHA)"
assert_eq "$N" "$(xlen outbox:c)" "outbox:c still untouched"
assert_not_contains "$(cat "$RELAY_LOG")" " error" "no error (EVALSHA)"

# --trim none, the default: nothing trimmed however much was acknowledged.
consume outbox:a ga 2000 >"$T/ga.more"
ack outbox:a ga <"$T/ga.more" >/dev/null
consume outbox:a ga2 2000 >"$T/ga2.more"
ack outbox:a ga2 <"$T/ga2.more" >/dev/null
la=$(xlen outbox:a)
relay_start --trim-interval 1s
psql_q "SELECT outbox_emit('a', 'none-' || i, 'created', '{}') FROM generate_series(1, 5) i" >/dev/null
wait_confirmed outbox_relay "$(current_lsn)" 30 || fail "events not confirmed (--trim none)"
sleep 2
relay_stop
assert_eq $((la + 5)) "$(xlen outbox:a)" "--trim none: outbox:a only grew"
assert_not_contains "$(cat "$RELAY_LOG")" "trim:" "--trim none: no trim line"

# Under maxmemory, where every XADD is refused (OOM), the trim call still runs
# (registered allow-oom; XTRIM is not deny-oom): trimming is what frees memory.
py '
def s(v): return v.decode() if isinstance(v, bytes) else v
ids = [s(p[0]) for p in r.call("XPENDING", "outbox:b", "gb", "-", "+", 100000)]
print(r.call("XACK", "outbox:b", "gb", *ids))' >"$T/b.acked"
assert_eq 500 "$(cat "$T/b.acked")" "gb acknowledged its 500 pending entries"
lb=$(xlen outbox:b)
redis_cli CONFIG SET maxmemory 1 >/dev/null
assert_contains "$(redis_cli XADD outbox:b '*' f v 2>&1)" "OOM" "(test) Redis refuses writes (maxmemory 1)"
n=$(redis_cli FCALL outbox_relay_trim 1 outbox:b 2>&1)
redis_cli CONFIG SET maxmemory 0 >/dev/null
assert_match "$n" '^[0-9]+$' "outbox_relay_trim runs under OOM"
assert_ge "$n" 400 "outbox_relay_trim under OOM removed what gb acknowledged"
assert_eq $((lb - n)) "$(xlen outbox:b)" "outbox:b lost exactly what the call reported"
pass
