#!/usr/bin/env python3
"""bench.py - measurement helpers for tests/bench/bench.sh (python3 stdlib only).

  bench.py run --json FILE [--meta K=V ...] [--pid NAME=PID ...] [--postmaster PID]
               [--redis SOCK|HOST:PORT ... [--xlen KEY|PATTERN [--check-ids]]]
               [--stdout FILE] [--stderr FILE] -- CMD ARGS...
      Run CMD, wait for it with wait4() and append one JSON object to FILE:
      wall_s (monotonic clock), user_s, sys_s and maxrss_kb of CMD (getrusage of
      the child), its exit code, and CPU usage of other processes sampled from
      /proc/<pid>/stat every 100 ms while CMD runs: each --pid NAME=PID, every
      walsender child of --postmaster (NAME "walsender"), the other children of
      --postmaster summed (NAME "postgres_other") and the whole machine
      (/proc/stat, NAME "machine", in core-seconds, and NAME "steal", the part
      of it the hypervisor gave to other guests). For each: cpu_s over the run
      and peak_pct, the highest utilisation over any 1 s window (100 = one core).
      Several --pid with the same NAME are summed (e.g. the masters of a cluster).
      With --redis (repeatable: every master of a cluster), the INFO stats /
      commandstats deltas summed over the servers; with --xlen, the summed XLEN
      of KEY or of every stream matching PATTERN, and the first / last XADD;
      with --check-ids, also the number of distinct "id" fields in those streams.

  bench.py redis-stats SOCK
      One JSON object from INFO stats + INFO commandstats: calls per command
      (cmdstat_*), total_net_input_bytes, total_net_output_bytes,
      total_reads_processed, total_writes_processed, total_commands_processed.

  bench.py consumer SOCK STREAM OUT
      Latency consumer: XREAD BLOCK 0 STREAMS STREAM <last id> in a loop from
      0-0, recording time.time() when each reply is complete, until SIGTERM or
      SIGINT; then writes "receipt_time entry_id" lines to OUT.

  bench.py latency SOCK STREAM RECEIPTS OUT_JSON
      Reads every entry of STREAM (XRANGE), joins it with the consumer's
      RECEIPTS, and writes per event_type percentiles of
        xadd_ms    = entry id millisecond timestamp - _committed_at
        receipt_ms = consumer receipt time          - _committed_at

  bench.py recvlat IN OUT_JSON RUNS_JSON
      pg_recvlogical under the latency load (not a strict floor: this reader is
      Python and costs CPU of its own): reads its wal2json output (format-version
      2 with include-timestamp) from IN until EOF, noting time.time() when each
      chunk arrives, and appends to OUT_JSON per event_type percentiles of
        receipt_ms = pg_recvlogical's output read - the transaction's commit
      (contender "pg_recvlogical"), with the CPU figures of RUNS_JSON.

  bench.py bare SOCK PATTERN OUT
      Every entry of every stream matching PATTERN, in order, as a bare
      "XADD <stream> * <field> <value> ..." into OUT (RESP, for redis-cli
      --pipe); prints how many. bench.sh replays them after each drain of the
      relay (defaults) to give Redis's cost of the same entries without the
      relay's dedup and watermark (issue 24, item 2). With OUT a file, also
      OUT.idx: where each command ends (native 8-byte integers), for
      xadd_gate.c (bench.sh's contender xadd_live).

  bench.py report RESULTS.jsonl [LATENCY.jsonl]
      Markdown tables of the drains (median of rounds) and of the latency runs.
"""
import array
import gzip
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------
# minimal RESP2 client (unix socket)
# ---------------------------------------------------------------------------
class RespError(Exception):
    pass


class Redis:
    def __init__(self, path, timeout=60):
        """path: a unix socket path, or HOST:PORT for TCP (e.g. a cluster node)."""
        if not path.startswith("/") and ":" in path:
            host, port = path.rsplit(":", 1)
            self.s = socket.create_connection((host, int(port)), timeout=timeout)
        else:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            self.s.connect(path)
        self.buf = b""

    def _fill(self):
        chunk = self.s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("connection closed by redis")
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode("utf-8", "surrogateescape")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RespError("protocol error: %r" % line)

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def call(self, *args):
        self.s.sendall(self.encode(*args))
        r = self._reply()
        if isinstance(r, RespError):
            raise r
        return r


def parse_info(text):
    d = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        d[k] = v
    return d


def redis_stats(sock):
    c = Redis(sock)
    st = parse_info(c.call("INFO", "stats"))
    cs = parse_info(c.call("INFO", "commandstats"))
    cpu = parse_info(c.call("INFO", "cpu"))
    out = {k: int(st.get(k, 0)) for k in (
        "total_net_input_bytes", "total_net_output_bytes", "total_reads_processed",
        "total_writes_processed", "total_commands_processed")}
    # Redis's own CPU (getrusage: every thread of the server, in µs), finer
    # than the /proc sampler's clock ticks over a short drain
    out["used_cpu_us"] = int(round((float(cpu.get("used_cpu_user", 0)) + float(cpu.get("used_cpu_sys", 0))) * 1e6))
    calls, usec = {}, {}
    for k, v in cs.items():
        if k.startswith("cmdstat_"):
            m = re.search(r"(?:^|,)calls=(\d+)", v)
            if m:
                calls[k[len("cmdstat_"):]] = int(m.group(1))
            m = re.search(r"(?:^|,)usec=(\d+)", v)
            if m:
                usec[k[len("cmdstat_"):]] = int(m.group(1))
    out["calls"] = calls
    # time inside each command (commandstats usec: wall clock around the
    # command's call; EXEC's includes the commands it runs)
    out["usec"] = usec
    return out


def redis_stats_sum(endpoints):
    """redis_stats summed over several servers (the masters of a cluster)."""
    tot = None
    for e in endpoints:
        st = redis_stats(e)
        if tot is None:
            tot = st
            continue
        for k, v in st.items():
            if k in ("calls", "usec"):
                for c, n in v.items():
                    tot[k][c] = tot[k].get(c, 0) + n
            else:
                tot[k] += v
    return tot


def stream_keys(c, pattern):
    """Stream keys of one server matching PATTERN (a plain key name when it
    has no glob character)."""
    if not any(ch in pattern for ch in "*?["):
        return [pattern] if c.call("EXISTS", pattern) else []
    keys, cur = set(), "0"
    while True:
        cur, batch = c.call("SCAN", cur, "MATCH", pattern, "COUNT", 1000, "TYPE", "stream")
        keys.update(batch)
        if cur == "0":
            return sorted(keys)


def xrange_all(c, key, page=10000):
    """Every entry of stream KEY, in order: (id, [field, value, ...])."""
    start = "-"
    while True:
        batch = c.call("XRANGE", key, start, "+", "COUNT", page)
        yield from batch
        if len(batch) < page:
            return
        start = "(" + batch[-1][0]


def streams_summary(endpoints, pattern, t0_wall, ids=False):
    """Over every stream matching PATTERN on every server: total XLEN, number
    of streams, first and last XADD (from the entry ids' millisecond
    timestamps, relative to t0_wall) and, with ids, how many entries carry an
    "id" field and how many distinct ids there are (exactly-once check)."""
    out = {"xlen": 0, "streams": 0}
    first = last = None
    seen, with_id = set(), 0
    for e in endpoints:
        c = Redis(e)
        for k in stream_keys(c, pattern):
            out["xlen"] += c.call("XLEN", k)
            out["streams"] += 1
            f = c.call("XRANGE", k, "-", "+", "COUNT", 1)
            l = c.call("XREVRANGE", k, "+", "-", "COUNT", 1)
            if f:
                ms = int(f[0][0].split("-")[0])
                first = ms if first is None else min(first, ms)
            if l:
                ms = int(l[0][0].split("-")[0])
                last = ms if last is None else max(last, ms)
            if ids:
                for eid, kv in xrange_all(c, k):
                    for i in range(0, len(kv), 2):
                        if kv[i] == "id":
                            seen.add(kv[i + 1])
                            with_id += 1
                            break
    if first is not None:
        out["first_xadd_s"] = round(first / 1000 - t0_wall, 3)
        out["last_xadd_s"] = round(last / 1000 - t0_wall, 3)
    if ids:
        out["entries_with_id"] = with_id
        out["distinct_ids"] = len(seen)
    return out


def cmd_bare(sock, pattern, out):
    c = Redis(sock)
    n = 0
    ends = array.array("Q")
    with open(out, "wb") as f:
        for k in stream_keys(c, pattern):
            for eid, kv in xrange_all(c, k):
                f.write(Redis.encode("XADD", k, "*", *[x.encode("utf-8", "surrogateescape") for x in kv]))
                ends.append(f.tell())
                n += 1
    if out != os.devnull:
        with open(out + ".idx", "wb") as f:
            ends.tofile(f)
    print(n)
    return 0


# ---------------------------------------------------------------------------
# run: timed child + /proc sampler
# ---------------------------------------------------------------------------
def proc_stat(pid):
    """The fields of /proc/<pid>/stat from field 3 (state) on, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rindex(b")") + 2:].split()


def proc_cpu_ticks(pid):
    """utime + stime of pid (fields 14/15)."""
    rest = proc_stat(pid)
    return None if rest is None else int(rest[11]) + int(rest[12])


def proc_children_ticks(pid):
    """cutime + cstime of pid (fields 16/17): the CPU ticks of its children
    that exited and were reaped (the kernel adds a child's times to its
    parent's when the parent waits for it)."""
    rest = proc_stat(pid)
    return None if rest is None else int(rest[13]) + int(rest[14])


def proc_ppid_and_cmd(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            s = f.read()
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return None, ""
    rest = s[s.rindex(b")") + 2:].split()
    return int(rest[1]), cmd


def machine_ticks():
    """Busy ticks of the whole machine (steal included) and, of those, steal:
    time the hypervisor gave this VM's CPUs to someone else."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    vals = [int(x) for x in parts[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals[:8]) - idle, (vals[7] if len(vals) > 7 else 0)


class Sampler(threading.Thread):
    """Samples the CPU time (utime + stime) of named processes every `period`
    seconds: the fixed --pid processes, the child, and the children of the
    postmaster (walsenders and the other backends). A process first seen after
    the first pass was started during the run, so all of its CPU time counts.

    A backend that exits between two passes takes the CPU time it used since
    the last one with it: up to `period` of a walsender that runs flat out to
    the end of a drain, which is most of it in a 0.2 s drain. The postmaster's
    cutime + cstime gets every reaped child's whole CPU time, so the last pass
    (made once the run's walsenders are gone: settle()) gives what the exited
    backends used beyond their last samples in all, and that is counted as
    the walsender's: the walsender is what exits at the end of a drain, and
    in a drain under 0.1 s it may never be sampled at all. A backend too
    short-lived to be sampled (a client's preflight connection) is in that sum
    too, so its few ms count as the walsender's as well. Only when the
    backends seen to exit are all others (pgbench's sessions ending a latency
    run) does the sum go to them."""

    def __init__(self, pids, postmaster, period=0.1):
        super().__init__(daemon=True)
        self.fixed = list(pids)          # (name, pid); one name may have several pids (summed)
        self.child = None                # pid of the timed child
        self.postmaster = postmaster
        self.period = period
        self.stop_ev = threading.Event()
        self.times = []                  # monotonic time of each pass
        self.machine = []                # machine busy ticks at each pass
        self.procs = {}                  # key -> {"name", "base", "ticks": {pass: ticks}}
        self.child_hwm_kb = 0
        self.child_io = {}
        self.reaped = []                 # postmaster's cutime + cstime at each pass
        self.at_start = set()            # postmaster children at the first pass

    def _track(self, key, name, pid, k):
        ticks = proc_cpu_ticks(pid)
        if ticks is None:
            return
        p = self.procs.get(key)
        if p is None:
            p = self.procs[key] = {"name": name, "base": ticks if k == 0 else 0, "ticks": {}}
        elif name == "walsender":  # a backend is named walsender once it has started as one
            p["name"] = name
        p["ticks"][k] = ticks

    def sample(self):
        k = len(self.times)
        self.times.append(time.monotonic())
        self.machine.append(machine_ticks())  # (busy, steal)
        pid = self.child
        if pid:
            try:
                with open("/proc/%d/status" % pid) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self.child_hwm_kb = max(self.child_hwm_kb, int(line.split()[1]))
                with open("/proc/%d/io" % pid) as f:
                    for line in f:
                        name, val = line.split(":")
                        if name in ("syscr", "syscw"):
                            self.child_io[name] = max(self.child_io.get(name, 0), int(val))
            except (OSError, ValueError):
                pass
        fixed = list(self.fixed) + ([("child", self.child)] if self.child else [])
        for name, pid in fixed:
            self._track(("fixed", name, pid), name, pid, k)
        if self.postmaster:
            self.reaped.append(proc_children_ticks(self.postmaster))
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                pid = int(d)
                ppid, cmd = proc_ppid_and_cmd(pid)
                if ppid != self.postmaster:
                    continue
                if not cmd.strip():
                    # exiting (its memory, and so its title, already gone): named
                    # by what it was; one never seen before is left to the reaped sum
                    p = self.procs.get(("pg", pid))
                    if p is not None:
                        self._track(("pg", pid), p["name"], pid, k)
                    continue
                name = "walsender" if "walsender" in cmd else "postgres_other"
                self._track(("pg", pid), name, pid, k)
                if k == 0:
                    self.at_start.add(("pg", pid))

    def _new_walsenders(self):
        """Walsenders that were not there at the first pass and are not reaped
        yet (an exiting one has lost its title: counted too)."""
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                ppid, cmd = proc_ppid_and_cmd(int(d))
                if (ppid == self.postmaster and ("walsender" in cmd or not cmd.strip())
                        and ("pg", int(d)) not in self.at_start):
                    out.append(int(d))
        return out

    def settle(self, timeout=2.0):
        """Wait (up to timeout) until the walsenders started during the run
        have exited, so the last pass finds them reaped."""
        if not self.postmaster:
            return
        end = time.monotonic() + timeout
        while time.monotonic() < end and self._new_walsenders():
            time.sleep(0.005)

    def run(self):
        while not self.stop_ev.is_set():
            self.stop_ev.wait(self.period)
            self.sample()

    def stop(self):
        self.stop_ev.set()
        self.join()

    def _stats(self, cum, wall):
        """cum[k]: cumulative CPU seconds at pass k. Mean utilisation over the
        run and peak utilisation over any window of >= 1 s between passes."""
        cpu = cum[-1] - cum[0]
        peak = None
        j = 0
        for i in range(1, len(cum)):
            while j + 1 < i and self.times[i] - self.times[j + 1] >= 1.0:
                j += 1
            dt = self.times[i] - self.times[j]
            if dt >= 1.0:
                peak = max(peak or 0.0, (cum[i] - cum[j]) / dt)
        if peak is None:  # run shorter than 1 s
            span = self.times[-1] - self.times[0]
            peak = cpu / span if span > 0 else 0.0
        return {"cpu_s": round(cpu, 3), "pct": round(100 * cpu / wall, 1) if wall > 0 else 0.0,
                "peak_pct": round(100 * peak, 1)}

    def _exited_extra(self, n):
        """(name, ticks): what the backends that exited during the run used
        after their last sample, or never sampled at all (see the class
        comment), and whose it is: the walsender's, unless only other
        backends were seen to exit (pgbench's sessions at the end of a
        latency run); ticks 0 when nothing is known."""
        if n < 2 or len(self.reaped) < 2 or None in (self.reaped[0], self.reaped[-1]):
            return "walsender", 0
        gone = [p for key, p in self.procs.items() if key[0] == "pg" and (n - 1) not in p["ticks"]]
        lost = (self.reaped[-1] - self.reaped[0]) - sum(p["ticks"][max(p["ticks"])] for p in gone)
        names = {p["name"] for p in gone}
        name = "postgres_other" if names == {"postgres_other"} else "walsender"
        return name, max(lost, 0)

    def summary(self, wall):
        n = len(self.times)
        by_name = {}
        for p in self.procs.values():
            cum, last = [], p["base"]
            for k in range(n):
                last = p["ticks"].get(k, last)
                cum.append((last - p["base"]) / CLK_TCK)
            tot = by_name.setdefault(p["name"], [0.0] * n)
            for k in range(n):
                tot[k] += cum[k]
        name, extra = self._exited_extra(n)
        if extra:  # used after the last sample of the exited backends: the run's end
            by_name.setdefault(name, [0.0] * n)[-1] += extra / CLK_TCK
        out = {name: self._stats(cum, wall) for name, cum in by_name.items()}
        if n >= 2:
            out["machine"] = self._stats([(m[0] - self.machine[0][0]) / CLK_TCK for m in self.machine], wall)
            out["steal"] = self._stats([(m[1] - self.machine[0][1]) / CLK_TCK for m in self.machine], wall)
        return out


def cmd_run(argv):
    jf, meta, pids, postmaster, so, se = None, {}, [], None, None, None
    redis_socks, xlen_key, check_ids = [], None, False
    i = 0
    while i < len(argv) and argv[i] != "--":
        a = argv[i]
        if a == "--json":
            jf = argv[i + 1]
        elif a == "--meta":
            k, v = argv[i + 1].split("=", 1)
            meta[k] = v
        elif a == "--pid":
            k, v = argv[i + 1].split("=", 1)
            pids.append((k, int(v)))
        elif a == "--postmaster":
            postmaster = int(argv[i + 1])
        elif a == "--redis":
            redis_socks.append(argv[i + 1])
        elif a == "--xlen":
            xlen_key = argv[i + 1]
        elif a == "--check-ids":
            check_ids = True
            i -= 1
        elif a == "--stdout":
            so = argv[i + 1]
        elif a == "--stderr":
            se = argv[i + 1]
        else:
            sys.exit("bench.py run: unknown option %s" % a)
        i += 2
    cmd = argv[i + 1:]
    if not cmd or not jf:
        sys.exit("bench.py run: need --json FILE -- CMD")
    before = redis_stats_sum(redis_socks) if redis_socks else None
    sampler = Sampler(pids, postmaster)
    sampler.sample()  # baseline before the child exists
    sampler.start()
    fo = open(so, "wb") if so else subprocess.DEVNULL
    fe = open(se, "wb") if se else subprocess.DEVNULL
    t0 = time.monotonic()
    t0_wall = time.time()
    p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
    sampler.child = p.pid
    # forward SIGTERM/SIGINT to the child
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda sig, _f: p.send_signal(sig))
    while True:
        try:
            _, status, ru = os.wait4(p.pid, 0)
            break
        except InterruptedError:
            continue
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop()
    sampler.settle()
    sampler.sample()  # final pass right after the child and its walsender exited
    rec = dict(meta)
    rec.update({
        "cmd": cmd[0], "rc": p.returncode, "wall_s": round(wall, 4),
        "user_s": round(ru.ru_utime, 4), "sys_s": round(ru.ru_stime, 4),
        # ru_maxrss of a child forked from this (big) Python process never
        # drops below Python's own RSS (Linux carries the pre-exec high-water
        # mark over exec), so the peak RSS reported is the child's VmHWM from
        # /proc, sampled every 100 ms; ru_maxrss is kept for reference.
        "maxrss_kb": sampler.child_hwm_kb, "ru_maxrss_kb": ru.ru_maxrss,
        # read/write system calls of the child, last sample (<= 100 ms before exit)
        "syscr": sampler.child_io.get("syscr"), "syscw": sampler.child_io.get("syscw"),
        "procs": sampler.summary(wall),
    })
    # The child's own CPU time from wait4(), exact; the samples lose what it
    # used after the last pass before it exited.
    ch = rec["procs"].setdefault("child", {"pct": 0.0, "peak_pct": 0.0})
    ch["cpu_s"] = round(ru.ru_utime + ru.ru_stime, 3)
    ch["pct"] = round(100 * ch["cpu_s"] / wall, 1) if wall > 0 else 0.0
    if redis_socks:
        after = redis_stats_sum(redis_socks)
        delta = {k: after[k] - before[k] for k in after if k not in ("calls", "usec")}
        for d in ("calls", "usec"):
            delta[d] = {k: v - before[d].get(k, 0) for k, v in after[d].items()
                        if v - before[d].get(k, 0)}
        if xlen_key:
            # XLEN summed over the matching streams of every server; first and
            # last XADD, from the entry ids' millisecond timestamps (same host
            # clock), relative to the start of the child
            delta.update(streams_summary(redis_socks, xlen_key, t0_wall, check_ids))
        rec["redis"] = delta
    with open(jf, "a") as f:
        f.write(json.dumps(rec) + "\n")
    return p.returncode if p.returncode >= 0 else 128 - p.returncode


# ---------------------------------------------------------------------------
# latency consumer
# ---------------------------------------------------------------------------
def cmd_consumer(sock, stream, out):
    """XREAD BLOCK 0 loop. To keep up at 20k events/s in Python, a reply is not
    parsed field by field: its entry ids are found with one regex and its end
    is detected by counting CRLFs, which is exact because no value written by
    the benchmark contains CR or LF (checked: a count past the expected one
    aborts)."""
    stop = {"flag": False}

    def on_sig(_s, _f):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_sig)
    signal.signal(signal.SIGINT, on_sig)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    s.settimeout(0.2)
    entry_re = re.compile(rb"\*2\r\n\$\d+\r\n(\d+-\d+)\r\n\*(\d+)\r\n")
    head_re = re.compile(rb"\*1\r\n\*2\r\n\$\d+\r\n[^\r]*\r\n\*(\d+)\r\n")
    last = b"0-0"
    receipts = []  # (time, [ids])
    pending = False
    buf = b""
    while True:
        if not pending:
            if stop["flag"]:
                break
            s.sendall(Redis.encode("XREAD", "BLOCK", "0", "STREAMS", stream, last))
            pending = True
            buf = b""
        try:
            chunk = s.recv(1 << 22)
        except socket.timeout:
            if stop["flag"]:
                break  # blocked, nothing new: done
            continue
        if not chunk:
            raise ConnectionError("redis closed the connection")
        now = time.time()
        buf += chunk
        if buf.startswith(b"*-1\r\n"):
            pending = False
            continue
        m = head_re.match(buf)
        if not m:
            if len(buf) > 4096 or buf.startswith(b"-"):
                raise RespError("unexpected reply: %r" % buf[:200])
            continue
        n = int(m.group(1))
        ids = entry_re.findall(buf, m.end())
        if len(ids) < n:
            continue
        nfields = int(ids[0][1])
        want = 5 + n * (4 + 2 * nfields)
        have = buf.count(b"\r\n")
        if have < want:
            continue
        if have > want or len(ids) != n:
            raise RespError("reply has CR/LF inside values; consumer assumption broken")
        receipts.append((now, [i for i, _ in ids]))
        last = ids[-1][0]
        pending = False
    with open(out, "w") as f:
        for t, ids in receipts:
            for i in ids:
                f.write("%.6f %s\n" % (t, i.decode()))
    return 0


# ---------------------------------------------------------------------------
# latency analysis
# ---------------------------------------------------------------------------
TS_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)?([+-]\d\d)(?::?(\d\d))?$")


def parse_pg_ts(s):
    m = TS_RE.match(s)
    if not m:
        raise ValueError("unparsable _committed_at %r" % s)
    base = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    frac = float(m.group(2)) if m.group(2) else 0.0
    off_h = int(m.group(3))
    off_m = int(m.group(4) or 0) * (1 if off_h >= 0 else -1)
    return base.timestamp() + frac - off_h * 3600 - off_m * 60


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    k = (len(sorted_vals) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def dist(vals):
    v = sorted(vals)
    return {"n": len(v), "p50": pct(v, 50), "p90": pct(v, 90), "p99": pct(v, 99),
            "max": v[-1] if v else float("nan"), "mean": statistics.fmean(v) if v else float("nan")}


def pgbench_summary(path):
    out = {}
    try:
        text = open(path).read()
    except OSError:
        return out
    m = re.search(r"^tps = ([0-9.]+)", text, re.M)
    if m:
        out["tps"] = float(m.group(1))
    m = re.search(r"^latency average = ([0-9.]+) ms", text, re.M)
    if m:
        out["latency_avg_ms"] = float(m.group(1))
    m = re.search(r"^rate limit schedule lag: avg ([0-9.]+) \(max ([0-9.]+)\) ms", text, re.M)
    if m:
        out["lag_avg_ms"], out["lag_max_ms"] = float(m.group(1)), float(m.group(2))
    return out


def load_runs(runs_json):
    """The `bench.py run` records of RUNS_JSON by their tag (r<rate>)."""
    runs = {}
    if runs_json and os.path.exists(runs_json):
        for line in open(runs_json):
            if line.strip():
                r = json.loads(line)
                runs[r["tag"]] = r
    return runs


def attach_run(r, run):
    """Add the producer step's CPU figures and pgbench's summary to latency record r."""
    if run:
        r["procs"] = run["procs"]
        r["pgbench_wall_s"] = run["wall_s"]
        r["pgbench"] = pgbench_summary(run.get("pgbench_log", ""))
    return r


def cmd_latency(sock, stream, receipts_file, out_json, runs_json=None):
    runs = load_runs(runs_json)
    rec = {}
    with open(receipts_file) as f:
        for line in f:
            t, i = line.split()
            rec[i] = float(t)
    c = Redis(sock)
    groups = {}
    start = "-"
    missing = 0
    # every entry: tag, commit time, XADD time (entry id), consumer receipt time
    entries = gzip.open(os.path.join(os.path.dirname(os.path.abspath(out_json)),
                                     "latency_entries.tsv.gz"), "wt")
    entries.write("tag\tcommit_unix_s\txadd_unix_s\treceipt_unix_s\n")
    while True:
        batch = c.call("XRANGE", stream, start, "+", "COUNT", 10000)
        for eid, kv in batch:
            d = dict(zip(kv[::2], kv[1::2]))
            tag = d.get("event_type", "?")
            commit = parse_pg_ts(d["_committed_at"])
            xadd = int(eid.split("-")[0]) / 1000.0
            g = groups.setdefault(tag, {"xadd": [], "receipt": [], "first": commit, "last": commit})
            g["xadd"].append((xadd - commit) * 1000)
            g["first"] = min(g["first"], commit)
            g["last"] = max(g["last"], commit)
            if eid in rec:
                g["receipt"].append((rec[eid] - commit) * 1000)
            else:
                missing += 1
            if entries is not None:
                entries.write("%s\t%.6f\t%.3f\t%s\n" % (
                    tag, commit, xadd, "%.6f" % rec[eid] if eid in rec else ""))
        if len(batch) < 10000:
            break
        start = "(" + batch[-1][0]
    entries.close()
    with open(out_json, "a") as f:
        for tag, g in sorted(groups.items()):
            r = {"tag": tag, "events": len(g["xadd"]),
                 "commit_span_s": round(g["last"] - g["first"], 3),
                 "xadd_ms": dist(g["xadd"]), "receipt_ms": dist(g["receipt"]),
                 "not_received": len(g["xadd"]) - len(g["receipt"])}
            f.write(json.dumps(attach_run(r, runs.get(tag))) + "\n")
    if missing:
        sys.stderr.write("latency: %d entries were not seen by the consumer\n" % missing)
    return 0


def cmd_recvlat(path, out_json, runs_json):
    """See the usage text: pg_recvlogical in the relay's place, the same load.
    Lines are matched, not parsed as JSON, to keep the reader's own cost per
    event small (wal2json's format-version 2 puts one action per line)."""
    begin_re = re.compile(rb'^\{"action":"B".*?"timestamp":"([^"]+)"')
    insert_re = re.compile(rb'^\{"action":"I".*?"name":"event_type","type":"[^"]*","value":"([^"]*)"')
    fd = os.open(path, os.O_RDONLY)
    groups, commit, rest = {}, None, b""
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        now = time.time()
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            m = begin_re.match(line)
            if m:
                commit = parse_pg_ts(m.group(1).decode())
                continue
            m = insert_re.match(line)
            if m and commit is not None:
                groups.setdefault(m.group(1).decode(), []).append((now - commit) * 1000)
    os.close(fd)
    runs = load_runs(runs_json)  # read now: the steps ran while this one read
    with open(out_json, "a") as f:
        for tag, v in sorted(groups.items()):
            r = {"tag": tag, "contender": "pg_recvlogical", "events": len(v), "receipt_ms": dist(v)}
            f.write(json.dumps(attach_run(r, runs.get(tag))) + "\n")
    return 0


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
# Mode plugins: pg_recvlogical_pgo / relay_pgo are the same with pgoutput (their "vs pg_recvlogical"
# is against pg_recvlogical_pgo, the baseline before them in this order).
CONTENDER_ORDER = ["pg_recvlogical", "relay", "xadd_live", "relay_norecord", "relay_nodedup", "relay_function", "relay_tcp", "relay_tls",
                   "relay_cluster", "pg_recvlogical_pgo", "relay_pgo", "relay_pgo_nostream", "relay_pgo_function"]
CONTENDER_LABEL = {"pg_recvlogical": "pg_recvlogical", "relay": "outbox-relay (defaults)",
                   "xadd_live": "bare XADD of the relay's entries, paced by a replication stream (xadd_gate)",
                   "relay_nodedup": "outbox-relay --dedup-window 0",
                   "relay_norecord": "outbox-relay --dedup-record 0",
                   "relay_function": "outbox-relay --publish function",
                   "relay_tcp": "outbox-relay, single node over TCP",
                   "relay_tls": "outbox-relay, single node over TLS (rediss://)",
                   "relay_cluster": "outbox-relay, 3-master cluster",
                   "pg_recvlogical_pgo": "pg_recvlogical, pgoutput",
                   "relay_pgo": "outbox-relay --plugin pgoutput",
                   "relay_pgo_nostream": "outbox-relay --plugin pgoutput --no-pgoutput-streaming",
                   "relay_pgo_function": "outbox-relay --plugin pgoutput --publish function"}


def per_batch(x):
    """Batches written in a drain: FCALLs, plus EXECs (--publish native writes a group of
    batches in one MULTI/EXEC; the function path sends none)."""
    c = x["calls"]
    return max(c.get("fcall", 0) + c.get("exec", 0), 1)


# The commands a native group's EXEC runs (the rest of a drain's commands are
# its reads, outside EXEC). Under --publish function every command but FCALL
# and the relay's start-up ones (ADMIN) runs inside an FCALL.
QUEUED = ("xadd", "hset", "hdel", "expireat", "set")
ADMIN = ("info", "function|load", "command|info", "config|get", "config|resetstat", "ping", "hello", "client|setname")
READS = ("hmget", "hkeys", "hgetall", "get", "type", "time", "watch", "unwatch", "multi", "exists", "hscan", "hget")


def by_command(x, ev):
    """One drain's Redis time per event by kind of command (commandstats usec
    deltas): the table's columns, by name."""
    u = x.get("usec", {})
    wrap = "fcall" if u.get("fcall") else "exec" if u.get("exec") else None
    nested = ([k for k in u if k not in ADMIN + ("fcall", "exec")] if wrap == "fcall" else
              list(QUEUED) if wrap == "exec" else [])
    us = lambda *names: sum(u.get(k, 0) for k in names) / ev
    return {"cpu": x["used_cpu_us"] / ev, "xadd": us("xadd"), "hset": us("hset", "hsetnx"),
            "expireat": us("expireat"), "hdel": us("hdel"), "reads": us(*READS),
            "own": max(us(wrap) - us(*nested), 0) if wrap else 0.0,
            "outside": x["used_cpu_us"] / ev - us(*(k for k in u if k not in nested)),
            "hset_calls": (x["calls"].get("hset", 0) + x["calls"].get("hsetnx", 0)) / ev}


def by_command_row(shape, cont, red, ev):
    """One row of the per-command table: by_command's columns, medians of the rounds."""
    parts = [by_command(x, ev) for x in red]
    cols = ("cpu", "xadd", "hset", "expireat", "hdel", "reads", "own", "outside", "hset_calls")
    return "| %s | %s | " % (shape, CONTENDER_LABEL[cont]) + " | ".join(
        fmt(med([p[c] for p in parts]), ".2f") for c in cols) + " |"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "–" if x is None else format(x, spec)


def cluster_summary(mrows, shapes, blog):
    """Compact table of the cluster comparison: throughput, CPU of walsender /
    client / redis-server(s), events per FCALL and the exactly-once check."""
    out = ["### Summary: Redis Cluster vs single node\n",
           "| shape | contender | events/s (median) | min–max | vs pg_recvlogical | "
           "CPU % walsender / client / redis-server(s) / machine | CPU µs/event walsender / client / redis | "
           "events per FCALL | delivered: Σ XLEN / distinct ids / streams |",
           "|---|---|---:|---:|---:|---|---|---:|---|"]
    for shape in shapes:
        srows = [r for r in mrows if r["shape"] == shape]
        base = None
        for cont in CONTENDER_ORDER:
            cr = [r for r in srows if r["contender"] == cont]
            if not cr:
                continue
            ev = int(cr[0]["events"])
            rates = [ev / r["wall_s"] for r in cr]
            rate = med(rates)
            if cont.startswith("pg_recvlogical"):
                base = rate
            red = [r["redis"] for r in cr if r.get("redis")]
            pct = lambda n: fmt(med([r["procs"].get(n, {}).get("pct") for r in cr]), ".0f")
            us = lambda n: fmt(med([r["procs"].get(n, {}).get("cpu_s", 0) / ev * 1e6 for r in cr]), ".1f")
            cpu_ev = fmt(med([(r["user_s"] + r["sys_s"]) / ev * 1e6 for r in cr]), ".1f")
            if red:
                xl = sorted({x.get("xlen") for x in red})
                di = sorted({x.get("distinct_ids") for x in red})
                st = sorted({x.get("streams") for x in red})
                j = lambda v: "/".join(format(a, ",") if isinstance(a, int) else "?" for a in v)
                ok = "✓" if xl == [ev] and di == [ev] else "✗"
                delivered = "%s %s / %s / %s" % (ok, j(xl), j(di), j(st))
                fc = fmt(med([ev / per_batch(x) for x in red]), ".1f")
            else:
                delivered, fc = "–", "–"
            out.append("| %s (%s events) | %s | %s | %s–%s | %s | %s / %s / %s / %s | %s / %s / %s | %s | %s |" % (
                shape, format(ev, ","), CONTENDER_LABEL[cont], fmt(rate, ",.0f"),
                fmt(min(rates), ",.0f"), fmt(max(rates), ",.0f"),
                fmt(rate / base, ".2f") if base else "–",
                pct("walsender"), pct("child"), pct("redis") if red else "–", pct("machine"),
                us("walsender"), cpu_ev, us("redis") if red else "–", fc, delivered))
    out.append("")
    out.append("(redis-server CPU is the sum of the 3 masters for the cluster; \"delivered\" is "
               "checked for every round: XLEN summed over every outbox stream on every server, "
               "and the number of distinct event ids among those entries, must both equal the "
               "backlog; ✓ = all rounds did.)\n")
    return out


def bounds_of(cr, ev, cpu_ev, with_redis):
    """(summed µs/event, the largest process's, the two-core bound, the bound
    with F) of one contender's rounds: see bound_row."""
    us = lambda n: med([r["procs"].get(n, {}).get("cpu_s", 0) / ev * 1e6 for r in cr])
    parts = [us("walsender"), cpu_ev] + ([us("redis")] if with_redis else [])
    total, top = sum(parts), max(parts)
    bound = min(1e6 / top, 2e6 / total) if top > 0 else None
    first = med([r["redis"].get("first_xadd_s") for r in cr if r.get("redis")])
    bound2 = None
    if bound and first is not None:
        s_all, largest = total * ev / 1e6, top * ev / 1e6
        bound2 = ev / max(first + max(s_all - first, 0.0) / 2, largest)
    return total, top, bound, bound2


def item3_verdict(ratio, bound_ratio):
    """Issue 24's item 3 for one shape: the relay (defaults) at least 0.9 of
    pg_recvlogical, or, where two cores cannot give 0.9 (its bound with F
    under 0.9 of pg_recvlogical), how close it comes to that bound."""
    if ratio is None:
        return "–"
    if ratio >= 0.9:
        return "met"
    if bound_ratio is not None and bound_ratio < 0.9:
        return "bound under 0.9: reaches %.2f of it" % (ratio / bound_ratio)
    if bound_ratio is None:
        return "missed (no bound)"
    return "missed: the bound allows %.2f" % bound_ratio


def bound_row(shape, cont, rate, base, bounds):
    """One row of the two-core bound table: the walsender's, the client's and
    (with Redis) redis-server's CPU µs per event, medians of the rounds.

    The second bound also counts the wait for the first change: until the
    walsender has decoded as far as the first one it sends (a large
    transaction read back from its spill files), no other process has work,
    so that phase runs on one core. A drain whose first stream entry came F
    seconds after the client started, and whose processes used S CPU
    seconds in all (the largest L), lasts at least max(F + (S - F) / 2, L).
    Only clients that write stream entries have F (not pg_recvlogical).
    bounds: what bounds_of() gives for the contender's rounds."""
    total, top, bound, bound2 = bounds
    return "| %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s |" % (
        shape, CONTENDER_LABEL[cont], fmt(total, ".1f"), fmt(top, ".1f"), fmt(bound, ",.0f"),
        fmt(bound / base, ".2f") if bound and base else "–",
        fmt(rate / base, ".2f") if base else "–",
        fmt(rate / bound, ".2f") if bound else "–",
        fmt(bound2 / base, ".2f") if bound2 and base else "–",
        fmt(rate / bound2, ".2f") if bound2 else "–")


def cmd_report(results, backlogs=None, latency=None):
    rows = [json.loads(l) for l in open(results) if l.strip()]
    blog = {}
    if backlogs and os.path.exists(backlogs):
        for l in open(backlogs):
            if l.strip():
                b = json.loads(l)
                blog[(b["mode"], b["shape"])] = b
    out = []
    item3 = []
    modes = []
    quota = os.environ.get("REDIS_CPU_QUOTA")  # bench.sh's cap on redis-server, % of one core
    bare = {}  # (mode, shape, round) -> bare XADD Redis CPU µs per event (bench.sh's bare_replay)
    bare_json = os.path.join(os.path.dirname(results), "bare.jsonl")
    if os.path.exists(bare_json):
        for l in open(bare_json):
            if l.strip():
                b = json.loads(l)
                bare[(b["mode"], b["shape"], int(b["round"]))] = b["used_cpu_us"] / b["events"]
    for r in rows:
        if r["mode"] not in modes:
            modes.append(r["mode"])
    for mode in modes:
        mrows = [r for r in rows if r["mode"] == mode]
        shapes = []
        for r in mrows:
            if r["shape"] not in shapes:
                shapes.append(r["shape"])
        title = {"noaof": "Redis without persistence (appendonly no)",
                 "aof": "Redis with appendonly yes, appendfsync everysec",
                 "cluster": "Redis Cluster (3 masters, loopback TCP) vs single node, appendonly no",
                 "tls": "one Redis over TCP vs the same Redis over TLS, appendonly no"}.get(mode, mode)
        if mode == "cluster":
            out.extend(cluster_summary(mrows, shapes, blog))
        out.append("### Drain throughput: %s\n" % title)
        out.append("| shape | events | backlog write s / WAL | contender | events/s (median) | min–max | "
                   "wall s (median) | vs pg_recvlogical | events/s to last XADD | vs pg_recvlogical |")
        out.append("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
        cost, bounds, bycmd = [], [], []
        for shape in shapes:
            srows = [r for r in mrows if r["shape"] == shape]
            base = None
            b = blog.get((mode, shape))
            for cont in CONTENDER_ORDER:
                cr = [r for r in srows if r["contender"] == cont]
                if not cr:
                    continue
                ev = int(cr[0]["events"])
                rates = [ev / r["wall_s"] for r in cr]
                rate = med(rates)
                cpu_ev = med([(r["user_s"] + r["sys_s"]) / ev * 1e6 for r in cr])
                if cont.startswith("pg_recvlogical"):
                    base = rate
                lx = med([ev / r["redis"]["last_xadd_s"] for r in cr
                          if r.get("redis") and r["redis"].get("last_xadd_s")])
                out.append("| %s | %s | %s | %s | %s | %s–%s | %s | %s | %s | %s |" % (
                    shape, format(ev, ","),
                    ("%.1f s / %s" % (b["write_s"], b["wal"])) if b and cont == CONTENDER_ORDER[0] else "",
                    CONTENDER_LABEL[cont], fmt(rate, ",.0f"), fmt(min(rates), ",.0f"),
                    fmt(max(rates), ",.0f"), fmt(med([r["wall_s"] for r in cr]), ".2f"),
                    fmt(rate / base, ".2f") if base else "–",
                    fmt(lx, ",.0f"), fmt(lx / base, ".2f") if base and lx else "–"))
                red = [r["redis"] for r in cr if r.get("redis")]
                bd = bounds_of(cr, ev, cpu_ev, bool(red))
                bounds.append(bound_row(shape, cont, rate, base, bd))
                if cont == "relay" and base and mode in ("noaof", "aof"):
                    bb = bd[3] or bd[2]
                    item3.append((title, shape, rate / base, bb / base if bb else None))
                if any(x.get("usec") for x in red):
                    bycmd.append(by_command_row(shape, cont, red, ev))
                pp = lambda n, k="pct": med([r["procs"].get(n, {}).get(k) for r in cr])
                mp = lambda n: "%s / %s" % (fmt(pp(n), ".0f"), fmt(pp(n, "peak_pct"), ".0f"))
                rm = lambda f, spec: fmt(med([f(x) for x in red]), spec) if red else "–"
                cost.append("| " + " | ".join([
                    shape, CONTENDER_LABEL[cont],
                    "%s / %s / %s" % (
                        fmt(med([r["procs"].get("walsender", {}).get("cpu_s", 0) / ev * 1e6 for r in cr]), ".1f"),
                        fmt(cpu_ev, ".1f"),
                        fmt(med([r["procs"].get("redis", {}).get("cpu_s", 0) / ev * 1e6 for r in cr]), ".1f")
                        if red else "–"),
                    fmt(med([r["maxrss_kb"] / 1024 for r in cr]), ".1f"),
                    # xadd_live sends neither FCALL nor EXEC
                    rm(lambda x: ev / per_batch(x), ".1f") if cont != "xadd_live" else "–",
                    rm(lambda x: ev / max(x["total_reads_processed"], 1), ".0f"),
                    fmt(med([ev / r["syscw"] for r in cr if r.get("syscw")]), ".1f") if red else "–",
                    rm(lambda x: x["total_net_input_bytes"] / ev, ",.0f"),
                    mp("child"), mp("walsender"), mp("redis") if red else "–",
                    fmt(pp("machine"), ".0f"),
                    ("%s / %s" % (rm(lambda x: x.get("first_xadd_s"), ".2f"),
                                  rm(lambda x: x.get("last_xadd_s"), ".2f"))) if red else "–",
                ]) + " |")
        out.append("")
        out.append("Costs per event and CPU use during the drains (%s; medians of the rounds; "
                   "CPU %% = CPU seconds / wall seconds, 100 = one core; \"peak\" = busiest 1 s window; "
                   "first / last XADD = seconds from the client's start to its first and last stream entry):\n" % title)
        out.append("| shape | contender | CPU µs/event: walsender / client / redis-server | client peak RSS MiB | events per FCALL or EXEC | "
                   "events per Redis read | events per client write() | Redis bytes in/event | client CPU % mean / peak | "
                   "walsender CPU % mean / peak | redis-server CPU % mean / peak | machine CPU % (of 200) | "
                   "first / last XADD s |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        out.extend(cost)
        out.append("")
        if bycmd:
            out.append("Where Redis's time goes during the drains (%s; issue 24, item 1, at full speed): "
                       "µs per event inside each kind of command (INFO commandstats usec, medians of the "
                       "rounds), beside Redis's CPU (used_cpu_user + used_cpu_sys). commandstats times a "
                       "command by the wall clock around it, so a server the kernel preempted mid-command "
                       "counts that wait too. \"EXEC's own\" is EXEC's time less the commands queued in it "
                       "(XADD, HSET, HDEL, EXPIREAT, SET): taking the group off the queue, freeing its "
                       "arguments, the transaction's bookkeeping (under --publish function, FCALL's time "
                       "less the commands its script ran, which the other columns hold: Lua). "
                       "\"outside\" is CPU no command's time "
                       "holds: reading and parsing the requests (queued commands included), writing the "
                       "replies, the event loop%s:\n" % (title, (
                           ". redis-server was capped here (REDIS_CPU_QUOTA): the time the kernel held it "
                           "back mid-command counts in that command, so the columns overstate the commands "
                           "and \"outside\" can go negative; Redis CPU does not"
                           if quota else "")))
            out.append("| shape | contender | Redis CPU | XADD | HSET, HSETNX | EXPIREAT | HDEL | reads (HMGET, HKEYS, "
                       "HGETALL, GET, TYPE, TIME, WATCH, ...) | EXEC's or FCALL's own | outside | HSET and HSETNX per event |")
            out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            out.extend(bycmd)
            out.append("")
        item2 = []
        cpu_of = lambda r: r["redis"]["used_cpu_us"] / int(r["events"])
        for shape in shapes:
            cr = [r for r in mrows if r["shape"] == shape and r["contender"] == "relay"
                  and r.get("redis", {}).get("used_cpu_us") is not None]
            live = {int(r["round"]): cpu_of(r) for r in mrows if r["shape"] == shape
                    and r["contender"] == "xadd_live" and r.get("redis", {}).get("used_cpu_us") is not None}
            pairs = [(cpu_of(r), bare[(mode, shape, int(r["round"]))])
                     for r in cr if (mode, shape, int(r["round"])) in bare]
            lpairs = [(cpu_of(r), live[int(r["round"])]) for r in cr if int(r["round"]) in live]
            if pairs:
                bs = [b for _, b in pairs]
                ls = [b for _, b in lpairs]
                item2.append("| %s | %s | %s (%.2f–%.2f) | %s | %s | %s | %s | %s |" % (
                    shape, fmt(med([a for a, _ in pairs]), ".2f"), fmt(med(bs), ".2f"), min(bs), max(bs),
                    fmt(med([a / b for a, b in pairs if b > 0]), ".2f"),
                    " ".join("%.2f" % (a / b) for a, b in pairs if b > 0),
                    ("%s (%.2f–%.2f)" % (fmt(med(ls), ".2f"), min(ls), max(ls))) if ls else "–",
                    fmt(med([a / b for a, b in lpairs if b > 0]), ".2f"),
                    " ".join("%.2f" % (a / b) for a, b in lpairs if b > 0) or "–"))
        if item2:
            out.append("Redis's CPU per event (%s; INFO used_cpu_user + used_cpu_sys): the relay (defaults) "
                       "during its drain, and a bare XADD of the very entries it wrote, two ways (issue 24, "
                       "item 2: within 2×): read back and sent again through redis-cli --pipe into the same "
                       "redis-server, emptied, right after that drain, with nothing beside it (replayed); "
                       "and the same commands sent while a slot of its own streams the same backlog, each one "
                       "once its row has come (xadd_live: a walsender and a client beside Redis, and groups, "
                       "as in the relay's drain). "
                       "Medians of the rounds, and each round's ratio. The bare runs' own spread between "
                       "rounds (min–max: the same commands each round) shows how far this machine's speed "
                       "moves between them:\n" % title)
            out.append("| shape | relay µs/event | bare XADD replayed µs/event (min–max) | relay ÷ replayed | rounds | "
                       "bare XADD in a drain (xadd_live) µs/event (min–max) | relay ÷ xadd_live | rounds |")
            out.append("|---|---:|---:|---:|---|---:|---:|---|")
            out.extend(item2)
            out.append("")
        ceil = []
        for shape in shapes if quota else []:  # the table only under the cap
            rate_of = lambda cont: {int(r["round"]): int(r["events"]) / r["wall_s"] for r in mrows
                                    if r["shape"] == shape and r["contender"] == cont}
            rl, xl = rate_of("relay"), rate_of("xadd_live")
            rounds = sorted(set(rl) & set(xl))
            if not rounds:
                continue
            rpct = lambda cont: med([r["procs"].get("redis", {}).get("pct") for r in mrows
                                     if r["shape"] == shape and r["contender"] == cont])
            ceil.append("| %s | %s | %s | %s | %s / %s | %s |" % (
                shape, fmt(med([rl[k] for k in rounds]), ",.0f"), fmt(med([xl[k] for k in rounds]), ",.0f"),
                fmt(med([rl[k] / xl[k] for k in rounds]), ".2f"),
                fmt(rpct("relay"), ".0f"), fmt(rpct("xadd_live"), ".0f"),
                " ".join("%.2f" % (rl[k] / xl[k]) for k in rounds)))
        if ceil:
            out.append("Redis's ceiling (%s; redis-server capped at %s %% of one core, REDIS_CPU_QUOTA): "
                       "each drain's events/s is then what that much of Redis publishes for the client. "
                       "The relay (defaults) against a bare XADD of the same entries in the relay's "
                       "groups (xadd_live), round by round (issue 24: within 2× is a ratio of at least "
                       "0.5). redis-server CPU %% should sit at the cap in both; where it does not, "
                       "something else limited that drain:\n" % (title, quota))
            out.append("| shape | relay events/s | xadd_live events/s | relay ÷ xadd_live | "
                       "redis-server CPU % relay / xadd_live | rounds |")
            out.append("|---|---:|---:|---:|---:|---|")
            out.extend(ceil)
            out.append("")
        out.append("Two-core bound (%s): each process is one thread and the machine has two cores, so "
                   "a contender drains at most min(10⁶ ÷ the largest of its processes' µs/event, "
                   "2 × 10⁶ ÷ their sum) events/s; medians of the rounds. The last two columns also "
                   "count the wait for the first change, when only the walsender has work (F = the "
                   "first stream entry's time from the client's start, S = the processes' CPU seconds, "
                   "L = the largest's: the drain lasts at least max(F + (S − F) ÷ 2, L)):\n" % title)
        out.append("| shape | contender | µs/event summed (largest) | bound events/s | bound ÷ pg_recvlogical | "
                   "achieved ÷ pg_recvlogical | achieved ÷ bound | bound with F ÷ pg_recvlogical | "
                   "achieved ÷ bound with F |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        out.extend(bounds)
        out.append("")
    if item3 and quota:
        out.append("### Issue 24, item 3: not measured in this run\n")
        out.append("redis-server was capped at %s %% of one core (REDIS_CPU_QUOTA), so Redis, not the "
                   "two cores, bounds every drain here, and the two-core bound above does not apply. "
                   "Item 3 needs a run without the cap.\n" % quota)
    elif item3:
        out.append("### Issue 24, item 3: the relay (defaults) against pg_recvlogical, shape by shape\n")
        out.append("At least 0.9 of pg_recvlogical (same plugin options, same backlog, same run), or, where "
                   "the two-core bound with F (the table above) is under 0.9 of it, how close the relay "
                   "comes to that bound:\n")
        out.append("| Redis | shape | relay ÷ pg_recvlogical | bound with F ÷ pg_recvlogical | verdict |")
        out.append("|---|---|---:|---:|---|")
        for title, shape, ratio, bratio in item3:
            out.append("| %s | %s | %s | %s | %s |" % (title, shape, fmt(ratio, ".2f"), fmt(bratio, ".2f"),
                                                    item3_verdict(ratio, bratio)))
        out.append("")
    if latency and os.path.exists(latency):
        allrows = [json.loads(l) for l in open(latency) if l.strip()]
        allrows.sort(key=lambda r: int(r["tag"].lstrip("r")) if r["tag"].lstrip("r").isdigit() else 0)
        lrows = [r for r in allrows if r.get("contender", "relay") == "relay"]
        frows = [r for r in allrows if r.get("contender") == "pg_recvlogical"]
        out.append("### Latency under steady load (relay live with --group, Redis without AOF)\n")
        out.append("| target events/s | events | achieved events/s | pgbench schedule lag avg / max ms | "
                   "commit → XADD (entry id) p50 / p90 / p99 / max ms | "
                   "commit → consumer XREAD p50 / p90 / p99 / max ms |")
        out.append("|---:|---:|---:|---:|---|---|")
        cpu = []
        for r in lrows:
            x, c = r["xadd_ms"], r["receipt_ms"]
            pg = r.get("pgbench", {})
            out.append("| %s | %s | %s | %s | %.1f / %.1f / %.1f / %.1f | %.1f / %.1f / %.1f / %.1f |" % (
                format(int(r["tag"].lstrip("r")), ","), format(r["events"], ","),
                fmt(r["events"] / r["pgbench_wall_s"] if r.get("pgbench_wall_s") else None, ",.0f"),
                "%s / %s" % (fmt(pg.get("lag_avg_ms"), ".2f"), fmt(pg.get("lag_max_ms"), ".1f")),
                x["p50"], x["p90"], x["p99"], x["max"], c["p50"], c["p90"], c["p99"], c["max"]))
            p = r.get("procs", {})
            g = lambda n: "%s / %s" % (fmt(p.get(n, {}).get("pct"), ".0f"), fmt(p.get(n, {}).get("peak_pct"), ".0f"))
            cpu.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                format(int(r["tag"].lstrip("r")), ","), g("relay"), g("redis"), g("walsender"),
                g("postgres_other"), g("child"), fmt(p.get("machine", {}).get("pct"), ".0f"),
                fmt(p.get("steal", {}).get("pct"), ".0f")))
        out.append("")
        out.append("CPU % (mean / peak 1 s) while the producer ran (postgres backends = every other "
                   "child of the postmaster, i.e. mostly pgbench's sessions):\n")
        out.append("| target events/s | relay | redis-server | walsender | postgres backends | pgbench | machine (of 200) | "
                   "of which steal |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        out.extend(cpu)
        out.append("")
        if frows:
            relay_p99 = {r["tag"]: r["receipt_ms"]["p99"] for r in lrows}
            out.append("The same load right after, with pg_recvlogical (the same wal2json options) in "
                       "the relay's place and a Python reader timestamping its output (commit → output "
                       "read: no Redis, no consumer). The relay's commit → consumer p99 is beside it:\n")
            out.append("| target events/s | events | pgbench schedule lag avg / max ms | "
                       "commit → pg_recvlogical output p50 / p90 / p99 / max ms | relay p99 ms | "
                       "relay p99 − pg_recvlogical p99 ms | pg_recvlogical / reader / walsender / machine / steal CPU % |")
            out.append("|---:|---:|---:|---|---:|---:|---:|")
            for r in frows:
                c, pg, p = r["receipt_ms"], r.get("pgbench", {}), r.get("procs", {})
                rp = relay_p99.get(r["tag"])
                out.append("| %s | %s | %s | %.1f / %.1f / %.1f / %.1f | %s | %s | %s / %s / %s / %s / %s |" % (
                    format(int(r["tag"].lstrip("r")), ","), format(r["events"], ","),
                    "%s / %s" % (fmt(pg.get("lag_avg_ms"), ".2f"), fmt(pg.get("lag_max_ms"), ".1f")),
                    c["p50"], c["p90"], c["p99"], c["max"], fmt(rp, ".1f"),
                    fmt(rp - c["p99"] if rp is not None else None, "+.1f"),
                    fmt(p.get("pg_recvlogical", {}).get("pct"), ".0f"), fmt(p.get("reader", {}).get("pct"), ".0f"),
                    fmt(p.get("walsender", {}).get("pct"), ".0f"), fmt(p.get("machine", {}).get("pct"), ".0f"),
                    fmt(p.get("steal", {}).get("pct"), ".0f")))
            out.append("")
    print("\n".join(out))
    return 0


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    op = argv[1]
    if op == "run":
        return cmd_run(argv[2:])
    if op == "redis-stats":
        print(json.dumps(redis_stats(argv[2])))
        return 0
    if op == "consumer":
        return cmd_consumer(*argv[2:5])
    if op == "latency":
        return cmd_latency(*argv[2:7])
    if op == "recvlat":
        return cmd_recvlat(*argv[2:5])
    if op == "bare":
        return cmd_bare(*argv[2:5])
    if op == "report":
        return cmd_report(*argv[2:5])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
