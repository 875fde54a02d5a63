#!/bin/bash
# 63_http_starvation: idle TCP connections cannot starve /healthz (issue 14,
# finding 10). The relay used to take 32 connections in all and keep an idle
# one for 10 s: 32 idle sockets queued every probe behind them.
#
# (a) 40 idle connections from 127.0.0.1 and 40 from 127.0.0.2, each one
#     reopened as soon as the relay drops it (a persistent client): probes from
#     127.0.0.3 still get 200 at once (the per-IP limit leaves room for others).
# (b) 40 idle connections from 127.0.0.3 itself, opened once (a client on the
#     kubelet's own address): a probe from 127.0.0.3 gets 200 once the idle
#     timeout drops them, within a bound well under a liveness failure.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

# The bounds: a probe's own timeout (a kubelet's default is 1 s), how long
# case (b) may take in all (the relay's idle timeout plus slack for a loaded
# machine), and the connections each client address opens.
PROBE_TIMEOUT=2
SAME_IP_BOUND=8
HOG_N=40

# hog.py HOST PORT SRC N SECONDS RECONNECT OUT: open N idle connections from
# SRC (sends nothing), write "ready" to OUT once all are connected; reopen a
# dropped one after 50 ms when RECONNECT is 1, else end once all are dropped.
# After SECONDS (or SIGTERM, or the last drop) write a summary line to OUT: opened, dropped by the relay, still open, and the
# longest time a connection lasted before the relay dropped it.
cat >"$T/hog.py" <<'PY'
import selectors, signal, socket, sys, time
host, port, src, n, secs, reconnect, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6] == "1", sys.argv[7]
sel = selectors.DefaultSelector()
opened = dropped = 0
longest = 0.0
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def open_one():
    global opened
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(5)
    s.connect((host, port))
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, time.monotonic())
    opened += 1
for _ in range(n):
    open_one()
with open(out, "a") as f:
    f.write("ready\n")
end = time.monotonic() + secs
pending = []
while not stop and time.monotonic() < end:
    if not reconnect and not sel.get_map():
        break
    for key, _ in sel.select(0.05):
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        if data:
            continue
        sel.unregister(key.fileobj)
        key.fileobj.close()
        dropped += 1
        longest = max(longest, time.monotonic() - key.data)
        if reconnect:
            pending.append(time.monotonic() + 0.05)
    now = time.monotonic()
    while pending and pending[0] <= now and not stop:
        pending.pop(0)
        try:
            open_one()
        except OSError:
            pending.append(now + 0.05)
with open(out, "a") as f:
    f.write("opened=%d dropped=%d open=%d longest_ms=%d\n" % (opened, dropped, len(sel.get_map()), longest * 1000))
PY

HOG_PIDS=()
# hog_start SRC SECONDS RECONNECT NAME: start hog.py against the relay in the background.
hog_start() {
	python3 "$T/hog.py" 127.0.0.1 "$PORT" "$1" "$HOG_N" "$2" "$3" "$T/hog.$4" &
	HOG_PIDS+=($!)
	echo "$!" >>"$T/relay.pids" # the cleanup trap SIGKILLs it if the test fails
	wait_for "grep -q ready '$T/hog.$4'" 20 || fail "hog $4 could not open $HOG_N connections from $1"
	log "hog $4: $HOG_N idle connections from $1 (reconnect=$3)"
}

# hog_stop_all: SIGTERM every hog and wait for its summary.
hog_stop_all() {
	local p
	for p in "${HOG_PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	HOG_PIDS=()
}

# probe SRC: GET /healthz from SRC bounded by PROBE_TIMEOUT; prints "CODE SECONDS"
# (CODE 000 when there was no answer).
probe() {
	curl -s -o /dev/null -m "$PROBE_TIMEOUT" --interface "$1" -w '%{http_code} %{time_total}' \
		"http://127.0.0.1:$PORT/healthz" 2>/dev/null || true
}

relay_start --http-addr 127.0.0.1:0
wait_for "grep -q 'serving /metrics' '$RELAY_LOG'" 10 || fail "no HTTP endpoint"
PORT=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$RELAY_LOG" | head -n 1)
[ -n "$PORT" ] || fail "no port in the log"
wait_for "slot_active outbox_relay" 15 || fail "relay not streaming"
r=$(probe 127.0.0.3)
assert_eq 200 "${r%% *}" "/healthz before any load"

# (a) Two other addresses hold (and keep reopening) idle connections.
hog_start 127.0.0.1 60 1 a1
hog_start 127.0.0.2 60 1 a2
sleep 1
good=0
for i in 1 2 3 4 5; do
	r=$(probe 127.0.0.3)
	log "probe $i from 127.0.0.3 under $((2 * HOG_N)) idle connections: $r (code, seconds)"
	[ "${r%% *}" != 200 ] || good=$((good + 1))
	sleep 0.5
done
assert_eq 5 "$good" "(a) probes from another address answered 200 within ${PROBE_TIMEOUT} s, of 5"
relay_alive || fail "relay died under the connection load"
# held SRC: the established connections from SRC to the relay's port that the
# relay has accepted (a socket still in the listen backlog has inode 0 in
# /proc/net/tcp), whatever the hog's own view, which lags on a loaded machine.
held() {
	python3 - "$1" "$PORT" <<'PY'
import socket, struct, sys
src, port = sys.argv[1], int(sys.argv[2])
want = "%08X" % struct.unpack("<I", socket.inet_aton(src))[0]
n = 0
for line in open("/proc/net/tcp").readlines()[1:]:
    f = line.split()
    lip, lport = f[1].split(":")
    rip = f[2].split(":")[0]
    if int(lport, 16) == port and rip == want and f[3] == "01" and f[9] != "0":
        n += 1
print(n)
PY
}
# Each address is held to the per-IP limit (8) of its 40: the relay closes the
# others as it accepts them. The hogs reconnect at once, so a look can find a
# few accepted and not yet closed (10 once in CI, under ASan with TLS): the
# bound is twice the limit, far below the 40 an address holds without it.
for src in 127.0.0.1 127.0.0.2; do
	most=0
	for i in 1 2 3; do
		n=$(held "$src")
		[ "$n" -le "$most" ] || most=$n
		sleep 0.2
	done
	assert_lt "$most" 16 "(a) connections from $src the relay held, most of 3 looks, of $HOG_N"
done
hog_stop_all
for h in a1 a2; do
	log "hog $h: $(tail -n 1 "$T/hog.$h")"
done

# (b) The probe's own address holds 40 idle connections (opened once).
sleep 1
t0=$(date +%s%N)
hog_start 127.0.0.3 30 0 b
n=0
while :; do
	n=$((n + 1))
	r=$(probe 127.0.0.3)
	[ "${r%% *}" = 200 ] && break
	waited=$((($(date +%s%N) - t0) / 1000000))
	[ "$waited" -lt $((SAME_IP_BOUND * 1000)) ] ||
		fail "(b) /healthz from 127.0.0.3 unanswered ${waited} ms after $HOG_N idle connections from the same address (last: [$r], $n probes)"
	sleep 0.2
done
waited=$((($(date +%s%N) - t0) / 1000000))
log "(b) /healthz 200 from the hogged address after $waited ms ($n probes; last $r)"
assert_lt "$waited" $((SAME_IP_BOUND * 1000)) "(b) a probe from the hogged address answered within ${SAME_IP_BOUND} s (ms)"
# Every connection of hog b is dropped: none lingers past the idle timeout.
wait_for "grep -q opened= '$T/hog.b'" "$SAME_IP_BOUND" ||
	fail "(b) idle connections from 127.0.0.3 still open $SAME_IP_BOUND s after the probe answered"
hog_stop_all
summary=$(tail -n 1 "$T/hog.b")
log "hog b: $summary"
assert_contains "$summary" "open=0" "(b) the relay dropped every idle connection"

r=$(probe 127.0.0.1)
assert_eq 200 "${r%% *}" "/healthz from 127.0.0.1 after the load"
relay_stop
assert_eq 0 "$RELAY_RC" "relay exit code"
pass
