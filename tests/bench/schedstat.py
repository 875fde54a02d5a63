#!/usr/bin/env python3
"""schedstat.py - where the relay's drain waits: a RELAY_BIN wrapper for
tests/bench/bench.sh (standard library only).

    RELAY_BIN=tests/bench/schedstat.py SCHEDSTAT_OUT=/tmp/sched.txt \\
        tests/bench/bench.sh --quick --shapes tx1,tx10 --modes noaof --no-latency

It runs the relay (SCHEDSTAT_RELAY, default: this tree's build-bench/ binary)
with the arguments it is given, finds the walsender it streams from and the
redis-server, and every 2 ms reads /proc/<pid>/schedstat of the three: the
time each spent on a CPU, waiting on a run queue (runnable, no CPU free for
it) and asleep (blocked: the walsender on a full socket, Redis and the relay
on nothing to do). At the relay's exit it appends one line to SCHEDSTAT_OUT
(default /tmp/schedstat.txt): the kind of run (defaults, no dedup, function),
the time from the walsender's start to the last sample, and each process's
three shares of it. Sampling every 2 ms costs a few % of a core; use it to
see what the processes wait for, not for the drain rates (its own start-up
is in the client's wall time)."""
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def pids_where(pred):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if pred(int(d)):
                    out.append(int(d))
            except OSError:
                pass
    return out


def is_walsender(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        c = f.read()
    return b"walsender" in c and b"START_REPLICATION" in c


def is_redis(pid):
    with open("/proc/%d/comm" % pid) as f:
        return f.read().strip() == "redis-server"


def schedstat(pid):
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return None


def main(argv):
    relay_bin = os.environ.get("SCHEDSTAT_RELAY") or os.path.join(ROOT, "build-bench", "cmd", "outbox-relay", "outbox-relay")
    out = os.environ.get("SCHEDSTAT_OUT", "/tmp/schedstat.txt")
    relay = subprocess.Popen([relay_bin] + argv[1:])
    ws = []
    for _ in range(2000):  # up to ~1 s for the relay to start streaming
        ws = pids_where(is_walsender)
        if ws or relay.poll() is not None:
            break
        time.sleep(0.0005)
    redis = pids_where(is_redis)
    if len(ws) != 1 or not redis:
        return relay.wait()
    pids = [ws[0], relay.pid, redis[0]]
    t0 = time.monotonic()
    first = [schedstat(p) for p in pids]
    last, t1 = first, t0
    while relay.poll() is None:
        now = [schedstat(p) for p in pids]
        if None in now or None in first:
            break
        last, t1 = now, time.monotonic()
        time.sleep(0.002)
    rc = relay.wait()
    args = " ".join(argv[1:])
    kind = "function" if "--publish function" in args else "no-dedup" if "--dedup-window 0" in args else "defaults"
    wall = t1 - t0
    if wall > 0 and None not in first:
        parts = []
        for name, a, b in zip(("walsender", "relay", "redis-server"), first, last):
            run, wait = (b[0] - a[0]) / 1e9, (b[1] - a[1]) / 1e9
            parts.append("%s run %3.0f%% wait %3.0f%% asleep %3.0f%%" % (
                name, 100 * run / wall, 100 * wait / wall, 100 * (wall - run - wait) / wall))
        with open(out, "a") as f:
            f.write("%-9s %.3f s  %s\n" % (kind, wall, "  ".join(parts)))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
