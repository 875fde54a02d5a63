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
# Installs nothing; needs redis-server, redis-cli and python3.
set -euo pipefail

FILL=${FILL:-12}
WRITES=${WRITES:-20000}
GROUP=${GROUP:-400}
ROUNDS=${ROUNDS:-3}
KS=("$@")
[ ${#KS[@]} -gt 0 ] || KS=(830 4170 16680)

T=$(mktemp -d /tmp/hset-spread.XXXXXX)
SOCK=$T/redis.sock
PID=
cleanup() {
	[ -z "$PID" ] || kill "$PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT

rcli() { redis-cli -s "$SOCK" "$@"; }

start_redis() {
	rm -f "$SOCK"
	redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --save '' \
		--appendonly no --dir "$T" --logfile "$T/redis.log" &
	PID=$!
	for _ in $(seq 100); do
		[ -S "$SOCK" ] && rcli PING >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "hset_spread: redis-server did not start: $(tail -n 3 "$T/redis.log")" >&2
	exit 1
}

stop_redis() {
	kill "$PID"
	wait "$PID" 2>/dev/null || true
	PID=
}

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

stats() {
	python3 - "$SOCK" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
def info(sec):
    s.sendall(b"*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n" % (len(sec), sec.encode()))
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(65536)
    n = int(buf[1:buf.index(b"\r\n")])
    body = buf[buf.index(b"\r\n") + 2:]
    while len(body) < n + 2:
        body += s.recv(65536)
    return dict(l.split(":", 1) for l in body[:n].decode().splitlines() if ":" in l)
cpu = info("cpu")
cs = info("commandstats").get("cmdstat_hset", "calls=0,usec=0")
d = dict(kv.split("=") for kv in cs.split(","))
print(int(round((float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6)), d["calls"], d["usec"])
EOF
}

printf '%-7s %-6s %-12s %-16s %-18s\n' K round "ids (MB)" "HSET µs/call" "Redis CPU µs/write"
for r in $(seq "$ROUNDS"); do
	for k in "${KS[@]}"; do
		gen "$k" "$((r * 100003 + k))"
		start_redis
		rcli --pipe <"$T/fill.resp" >"$T/pipe.out" 2>&1 || { cat "$T/pipe.out" >&2; exit 1; }
		grep -q "errors: 0," "$T/pipe.out" || { cat "$T/pipe.out" >&2; exit 1; }
		rcli CONFIG RESETSTAT >/dev/null
		read -r c0 _ _ < <(stats)
		rcli --pipe <"$T/writes.resp" >"$T/pipe.out" 2>&1 || { cat "$T/pipe.out" >&2; exit 1; }
		grep -q "errors: 0," "$T/pipe.out" || { cat "$T/pipe.out" >&2; exit 1; }
		read -r c1 calls usec < <(stats)
		[ "$calls" = "$WRITES" ] || { echo "hset_spread: $calls HSETs ran, expected $WRITES" >&2; exit 1; }
		n=$(rcli EVAL "local n = 0 for j = 0, tonumber(ARGV[1]) - 1 do n = n + redis.call('HLEN', 'outbox-relay:dd:{outbox:bench}:7200:245000:' .. j) end return n" 0 "$k")
		[ "$n" = "$((k * FILL + WRITES))" ] || { echo "hset_spread: $n ids in the hashes, expected $((k * FILL + WRITES))" >&2; exit 1; }
		printf '%-7s %-6s %-12s %-16s %-18s\n' "$k" "$r" "$n ($(python3 -c "print(round($n * 25 / 1e6, 1))"))" \
			"$(python3 -c "print(round($usec / $calls, 2))")" "$(python3 -c "print(round(($c1 - $c0) / $WRITES, 2))")"
		stop_redis
	done
done
