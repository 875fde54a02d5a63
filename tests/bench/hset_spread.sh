#!/bin/bash
# hset_spread.sh - what one dedup HSET costs Redis as the bucket it writes
# into grows (issue 24): the same writes, the same fill of each hash, only
# the number of hashes they spread over differs.
#
#   tests/bench/hset_spread.sh [K...]      (default 830 4170 16680)
#
# For each K, a fresh redis-server (no persistence, unix socket, temp dir)
# gets K hashes named as a dedup bucket's, each holding FILL (12) ids of 19
# random bytes with a small integer value, and an EXPIREAT, as the relay's
# bucket of K hashes holds half-way through a drain. Then WRITES (20000) new
# random ids, each into a hash chosen at random, are sent in MULTI/EXEC
# groups of GROUP (400) one-field HSETs, with redis-cli --pipe. Printed per
# K, for ROUNDS (3) rounds taken in turns: the HSET's µs per call
# (INFO commandstats usec: wall clock around the command) and Redis's CPU
# µs per write (used_cpu_user + used_cpu_sys over the measured part). The
# hashes' listpack bytes grow with K (about 25 bytes an id), so a larger K
# puts each write's key and listpack further from the core's caches, while
# the instructions per HSET stay the same (each hash is FILL ids long).
# Installs nothing; needs redis-server, redis-cli and python3; the servers
# come from tests/integration/lib.sh, the counters from bench.py redis-stats.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FILL=${FILL:-12}
WRITES=${WRITES:-20000}
GROUP=${GROUP:-400}
ROUNDS=${ROUNDS:-3}
KS=("$@")
[ ${#KS[@]} -gt 0 ] || KS=(830 4170 16680)
BENCH_PY=$ROOT/tests/bench/bench.py

# The integration harness starts, checks and always stops the servers; no
# relay runs here.
export TESTS_DIR=$ROOT/tests NEED_RELAY=0 RELAY_BIN=
. "$ROOT/tests/integration/lib.sh"
setup_tmp

# gen K SEED: the prefill (T/fill.resp) and the measured writes
# (T/writes.resp) as RESP.
gen() {
	python3 - "$1" "$2" "$FILL" "$WRITES" "$GROUP" "$T" <<'EOF'
import os, random, sys, time
k, seed, fill, writes, group = (int(a) for a in sys.argv[1:6])
out = sys.argv[6]
rnd = random.Random(seed)
exp = str(int(time.time()) + 3 * 3600).encode()

def cmd(*args):
    b = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        b.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(b)

key = lambda j: b"outbox-relay:dd:{outbox:bench}:7200:245000:%d" % j
with open(os.path.join(out, "fill.resp"), "wb") as f:
    for j in range(k):
        args = [b"HSET", key(j)]
        for _ in range(fill):
            args += [rnd.randbytes(19), rnd.randrange(7200)]
        f.write(cmd(*args))
        f.write(cmd(b"EXPIREAT", key(j), exp))
with open(os.path.join(out, "writes.resp"), "wb") as f:
    for i in range(writes):
        if i % group == 0:
            f.write(cmd(b"MULTI"))
        f.write(cmd(b"HSET", key(rnd.randrange(k)), rnd.randbytes(19), rnd.randrange(7200)))
        if i % group == group - 1 or i == writes - 1:
            f.write(cmd(b"EXEC"))
EOF
}

printf '%-7s %-6s %-12s %-16s %-18s\n' K round "ids (MB)" "HSET µs/call" "Redis CPU µs/write"
for r in $(seq "$ROUNDS"); do
	for k in "${KS[@]}"; do
		gen "$k" "$((r * 100003 + k))"
		redis_start
		redis_cli --pipe <"$T/fill.resp" >"$T/pipe.out" 2>&1 && grep -q "errors: 0," "$T/pipe.out" ||
			fail "prefill: $(tail -n 3 "$T/pipe.out")"
		redis_cli CONFIG RESETSTAT >/dev/null
		python3 "$BENCH_PY" redis-stats "$REDIS_SOCK" >"$T/before.json"
		redis_cli --pipe <"$T/writes.resp" >"$T/pipe.out" 2>&1 && grep -q "errors: 0," "$T/pipe.out" ||
			fail "writes: $(tail -n 3 "$T/pipe.out")"
		python3 "$BENCH_PY" redis-stats "$REDIS_SOCK" >"$T/after.json"
		n=$(redis_cli EVAL "local n = 0 for j = 0, tonumber(ARGV[1]) - 1 do n = n + redis.call('HLEN', 'outbox-relay:dd:{outbox:bench}:7200:245000:' .. j) end return n" 0 "$k")
		[ "$n" = "$((k * FILL + WRITES))" ] || fail "$n ids in the hashes, expected $((k * FILL + WRITES))"
		python3 - "$T/before.json" "$T/after.json" "$k" "$r" "$n" "$WRITES" <<'EOF'
import json, sys
b, a = (json.load(open(f)) for f in sys.argv[1:3])
k, r, n, writes = sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
calls = a["calls"].get("hset", 0) - b["calls"].get("hset", 0)
if calls != writes:
    sys.exit("hset_spread: %d HSETs ran, expected %d" % (calls, writes))
usec = a["usec"]["hset"] - b["usec"].get("hset", 0)
print("%-7s %-6s %-12s %-16s %-18s" % (k, r, "%d (%.1f)" % (n, n * 25 / 1e6), round(usec / calls, 2),
                                       round((a["used_cpu_us"] - b["used_cpu_us"]) / writes, 2)))
EOF
		redis_stop
	done
done
