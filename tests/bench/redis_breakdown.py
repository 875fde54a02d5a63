#!/usr/bin/env python3
"""redis_breakdown.py - helpers of tests/bench/redis_breakdown.sh (standard library only).

  redis_breakdown.py feed SOCK STREAM KEY OUT [FIRST [COUNT]]
                                                every entry of STREAM (read with XRANGE from
                                                the Redis on unix socket SOCK) as a plain
                                                "XADD KEY * field value ..." in RESP, to OUT
                                                (for redis-cli --pipe); prints the count;
                                                FIRST skips that many entries, COUNT stops
                                                after that many
  redis_breakdown.py analyze CGFILE [relay|native|bare] [CMDSTATS]
                                                one callgrind dump of redis-server -> JSON
                                                of instructions per bucket (see below);
                                                native: the relay on --publish native
  redis_breakdown.py entry SOCK STREAM INDEX    the INDEXth entry of STREAM as XADD's
                                                field and value arguments, each ended by
                                                a NUL byte (for redis-benchmark)
  redis_breakdown.py report RELAY.json BARE.json EVENTS [CPU.json]
                                                the table (instructions per event)
  redis_breakdown.py cpu CPU.json LABEL         the CPU lines alone (CG_RUN=0)

How a callgrind dump is cut into buckets. Debian's redis-server is stripped: the
functions Redis exports keep their names (scriptCall, parseReply, luaCallFunction,
xaddCommand, ...) but its static functions and Lua's internals (luaRedisGenericCommand,
luaCreateArray, luaV_execute, ...) show as addresses. So the buckets are found by
name where there is one and by position in the call graph where there is not
(callgrind records, per caller->callee pair, the inclusive cost of those calls):

  G        = the callers of scriptCall: redis.call/redis.pcall's C side
             (luaRedisGenericCommand, inlined into its two wrappers)
  ARGS     = callees of luaCallFunction (other than lua_pcall) that call lua_pushlstring
             or lua_createtable: luaCreateArray, KEYS and ARGV turned into Lua tables
  FREPLY   = callees of luaCallFunction that call addReply*: luaReplyToRedisReply

  fcall.args_to_lua   luaCallFunction -> ARGS
  fcall.lua           luaCallFunction -> lua_pcall, less every call into G: the Lua VM,
                      its string/table library, its GC (also of the strings ARGS made)
  fcall.glue          calls into G less G -> scriptCall and the reply conversion: the
                      arguments of redis.call from Lua values to Redis objects and back
                      (lua_tolstring, createStringObject, freeLuaRedisArgv), the fake
                      client's reset
  fcall.reply_to_lua  G -> parseReply (or a G callee calling parseReply): each
                      command's RESP reply turned into Lua values
  fcall.dispatch      G -> scriptCall less the command procedures under it: lookupCommand,
                      ACL checks, call()'s bookkeeping (latency histogram, slowlog,
                      propagation, freeClientOriginalArgv)
  fcall.cmd.*         call'2 (call() under scriptCall) -> each xxxCommand, grouped below;
                      each includes writing its own reply to the script's fake client
  fcall.reply         luaCallFunction -> FREPLY: the FCALL's reply to the relay (addReply*)
  fcall.other         fcallCommand less all of the above (function lookup, run setup)
  read_parse          readQueryFromClient less processCommand: read(), RESP parsing into
                      argument objects (processMultibulkBuffer), freeing them afterwards
  dispatch            processCommand less the command procedures call() runs
  write               writeToClient: replies written to the socket
  other_cmds          command procedures other than FCALL/XADD run by the client
                      (FUNCTION LOAD, INFO, PING, ...: once per run)
  other               the rest of the process (event loop, beforeSleep, cron)

Two more lines are parts of the buckets above, shown apart: Lua's garbage collector
(luaC_step, found as what lua_gc calls), which runs wherever an allocation triggers it
(mostly inside luaCreateArray's lua_pushlstring, so inside fcall.args_to_lua), and Lua's
string creation (luaS_newlstr, found as lua_pushlstring's callee other than the GC; Lua
5.1 hashes and interns every string it is given).

The relay on --publish native (kind native): no Lua; the relay sends, outside MULTI,
UNWATCH/WATCH, GET of the watermark, TYPE, TIME, HGETALL of the dedup index and HMGET
(HGETALL, EXISTS) of the dedup shards, then MULTI, the writes (queued), EXEC:

  exec                execCommand over its recursion levels, in all
  exec.cmd.*          call'2 (call() under execCommand) -> each xxxCommand, grouped by
                      NATIVE_EXEC_BUCKET (HSET/HDEL of the shards and of the index hash
                      are the same procedures: one line)
  exec.dispatch       call'2 less the command procedures under it: call()'s bookkeeping
                      (latency histogram, slowlog, propagation, freeClientOriginalArgv)
  exec.free_args      execCommand -> freeClientMultiState: the queued commands' argument
                      objects freed (a plain command frees its own in read_parse)
  exec.watch          execCommand -> isWatchedKeyExpired, unwatchAllKeys
  exec.other          the rest of execCommand (ACL check of each queued command, reply)
  queue               call -> multiCommand, processCommand -> queueMultiCommand
  watch               call -> watchCommand, unwatchCommand
  getset              call -> getCommand, setCommand outside MULTI: the watermark's GET
                      (read 1) and the relay's slot record (GET/SET)
  type_time           call -> typeCommand, timeCommand (read 1)
  dedup_read          call -> hmgetCommand, hgetallCommand, existsCommand (the index,
                      the shards, the old layout)
  read_parse, write, other_cmds, other: as above; dispatch: processCommand less the
                      command procedures call() runs and less queueMultiCommand

touchWatchedKey (signalModifiedKey's check for clients watching the key a write
changed) is inside the write commands' lines; its total is shown apart (info).

Callgrind counts user-space instructions only: the kernel's side of read(), write() and
epoll_wait() is in no bucket (the CPU seconds of CPU_RUN include it).
"""
import collections
import json
import os
import re
import socket
import sys

# command procedure -> bucket (inside the function)
CMD_BUCKET = {
    "xaddCommand": "xadd",
    "hsetnxCommand": "dedup",
    "hexistsCommand": "dedup",
    "hgetCommand": "dedup",
    "hsetCommand": "dedup",
    "expireatCommand": "dedup",
    "existsCommand": "dedup",
    "timeCommand": "dedup",
    "hscanCommand": "index",
    "hdelCommand": "index",
    "getCommand": "watermark",
    "setCommand": "watermark",
}


# command procedure run inside EXEC -> bucket (--publish native)
NATIVE_EXEC_BUCKET = {
    "xaddCommand": "xadd",
    "hsetCommand": "dedup_write",
    "hdelCommand": "dedup_write",
    "expireatCommand": "dedup_write",
    "setCommand": "watermark",
}
# command procedure run by the client outside MULTI -> bucket (--publish native)
NATIVE_TOP_BUCKET = {
    "watchCommand": "watch",
    "unwatchCommand": "watch",
    "multiCommand": "queue",
    "getCommand": "getset",
    "setCommand": "getset",
    "typeCommand": "type_time",
    "timeCommand": "type_time",
    "hmgetCommand": "dedup_read",
    "hgetallCommand": "dedup_read",
    "existsCommand": "dedup_read",
}


def base(name):
    """call'2 -> call (callgrind's recursion level suffix)."""
    return name.split("'", 1)[0]


class Profile:
    def __init__(self, path):
        ids = {"ob": {}, "fl": {}, "fn": {}}
        space = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl",
                 "cfl": "fl", "fn": "fn", "cfn": "fn"}
        self.self = collections.Counter()
        self.arcs = collections.Counter()
        self.summary = 0
        ob = cob = fn = cfn = None
        incall = False
        rx = re.compile(r"\((\d+)\)(?: (.*))?$")

        def name(kind, v):
            m = rx.match(v)
            if not m:
                return v
            if m.group(2) is not None:
                ids[space[kind]][m.group(1)] = m.group(2)
                return m.group(2)
            return ids[space[kind]][m.group(1)]

        def key(n, o):
            # anonymous (stripped) functions are only unique within their object
            return n + "@" + os.path.basename(o or "?") if n.startswith("0x") else n

        with open(path) as f:
            for line in f:
                c = line[0]
                if c.isdigit() or c in "+-*":
                    p = line.split()
                    v = int(p[1]) if len(p) > 1 else 0
                    if incall:
                        self.arcs[(fn, key(cfn, cob or ob))] += v
                        incall, cob = False, None
                    else:
                        self.self[fn] += v
                    continue
                k, _, v = line.rstrip("\n").partition("=")
                if k == "ob":
                    ob = name(k, v)
                elif k == "fn":
                    fn = key(name(k, v), ob)
                elif k == "cob":
                    cob = name(k, v)
                elif k == "cfn":
                    cfn = name(k, v)
                elif k == "calls":
                    incall = True
                elif k in ("fl", "fi", "fe", "cfi", "cfl"):
                    name(k, v)
                elif line.startswith(("summary:", "totals:")):
                    self.summary = int(line.split()[1])
        self.out = collections.defaultdict(collections.Counter)
        self.into = collections.defaultdict(collections.Counter)
        for (a, b), v in self.arcs.items():
            if a != b:
                self.out[a][b] += v
                self.into[b][a] += v
        self.total = sum(self.self.values())

    def incl(self, fn):
        return self.self[fn] + sum(self.out[fn].values())

    def incl_all(self, name):
        """Inclusive cost of a function over its recursion levels (name, name'2, ...),
        counting calls between the levels once."""
        fns = [f for f in self.self.keys() | self.into.keys() if base(f) == name]
        s = 0
        for f in fns:
            s += self.self[f] + sum(v for c, v in self.out[f].items() if base(c) != name)
        return s

    def calls_any(self, fn, names, prefix=None):
        for c in self.out[fn]:
            b = base(c)
            if b in names or (prefix and b.startswith(prefix)):
                return True
        return False


def analyze(path, kind):
    p = Profile(path)
    b = collections.Counter()
    cmds = collections.Counter()
    top_call = [f for f in p.self.keys() | p.into.keys() if f == "call"]
    # command procedures run by the clients (call() at top level)
    for c, v in p.out["call"].items():
        if base(c).endswith("Command"):
            cmds["top:" + base(c)] += v
    fcall = p.incl_all("fcallCommand")
    if kind == "relay":
        G = set(p.into["scriptCall"])
        entry_g = sum(v for g in G for c, v in p.into[g].items() if c not in G)
        to_script = sum(p.out[g]["scriptCall"] for g in G)
        reply_lua = 0
        for g in G:
            for c, v in p.out[g].items():
                if c in G or c == "scriptCall":
                    continue
                if base(c) == "parseReply" or base(c).startswith("redisProtocolToLuaType") \
                        or p.calls_any(c, {"parseReply"}):
                    reply_lua += v
        lcf = p.out["luaCallFunction"]
        args = freply = pcall = 0
        for c, v in lcf.items():
            n = base(c)
            if n == "lua_pcall":
                pcall += v
            elif n == "luaCreateArray" or p.calls_any(c, {"lua_pushlstring", "lua_createtable"}):
                args += v
            elif n == "luaReplyToRedisReply" or p.calls_any(c, set(), prefix="addReply"):
                freply += v
        procs = 0
        for c, v in p.out["call'2"].items():
            if base(c).endswith("Command"):
                cmds[base(c)] += v
                b["fcall.cmd." + CMD_BUCKET.get(base(c), "other")] += v
                procs += v
        b["fcall.args_to_lua"] = args
        b["fcall.lua"] = pcall - entry_g
        b["fcall.glue"] = entry_g - to_script - reply_lua
        b["fcall.reply_to_lua"] = reply_lua
        b["fcall.dispatch"] = to_script - procs
        b["fcall.reply"] = freply
        b["fcall.other"] = fcall - sum(v for k, v in b.items() if k.startswith("fcall."))
        if not G or not pcall or not args:
            sys.stderr.write("redis_breakdown: %s: scriptCall's callers, lua_pcall or the "
                             "argument conversion not found in the call graph\n" % path)
    info = {}
    if kind == "relay":
        # Spread over the buckets above, shown apart: Lua's garbage collector
        # (luaC_step: what lua_gc calls; it runs where an allocation triggers it,
        # mostly in the argument conversion) and Lua's string creation (luaS_newlstr:
        # lua_pushlstring's other callee; every string is hashed and interned).
        gc = {c for c in p.out["lua_gc"] if base(c) not in ("lua_gc",)} or \
            {f for f in p.self if base(f) == "luaC_step"}
        info["lua_gc"] = sum(v for s in gc for c, v in p.into[s].items() if c not in gc)
        mk = {c for c in p.out["lua_pushlstring"] if c not in gc} or \
            {f for f in p.self if base(f) == "luaS_newlstr"}
        info["lua_newstr"] = sum(v for s in mk for c, v in p.into[s].items() if c not in mk)
    b["read_parse"] = p.incl_all("readQueryFromClient") - p.incl_all("processCommand")
    b["dispatch"] = p.incl_all("processCommand") - sum(p.out["call"][c] for c in p.out["call"]
                                                        if base(c).endswith("Command"))
    b["write"] = p.incl_all("writeToClient")
    main = "fcallCommand" if kind == "relay" else "xaddCommand"
    b["main"] = p.out["call"][main] if kind == "bare" else 0
    b["other_cmds"] = sum(v for c, v in p.out["call"].items()
                          if base(c).endswith("Command") and base(c) != main)
    inner = sum(v for k, v in b.items() if k.startswith("fcall.")) + b["main"]
    b["other"] = p.total - inner - b["read_parse"] - b["dispatch"] - b["write"] - b["other_cmds"]
    return {"kind": kind, "total": p.total, "summary": p.summary, "fcall": fcall,
            "xadd": p.incl_all("xaddCommand"), "buckets": dict(b), "cmds": dict(cmds),
            "info": info}


def analyze_native(path):
    """The relay on --publish native: see the header."""
    p = Profile(path)
    b = collections.Counter()
    cmds = collections.Counter()
    exe = p.incl_all("execCommand")
    procs = 0
    for c, v in p.out["call'2"].items():
        if base(c).endswith("Command"):
            cmds[base(c)] += v
            b["exec.cmd." + NATIVE_EXEC_BUCKET.get(base(c), "other")] += v
            procs += v
    b["exec.dispatch"] = sum(p.out["call'2"].values()) + p.self["call'2"] - procs
    oe = p.out["execCommand"]
    b["exec.free_args"] = sum(v for c, v in oe.items() if base(c) == "freeClientMultiState")
    b["exec.watch"] = sum(v for c, v in oe.items()
                          if base(c) in ("isWatchedKeyExpired", "unwatchAllKeys"))
    b["exec.other"] = exe - sum(v for k, v in b.items() if k.startswith("exec."))
    if not exe or not p.out["call'2"]:
        sys.stderr.write("redis_breakdown: %s: execCommand or the commands it runs not found "
                         "in the call graph\n" % path)
    top = 0
    for c, v in p.out["call"].items():
        n = base(c)
        if not n.endswith("Command") or n == "execCommand":
            continue
        cmds["top:" + n] += v
        b[NATIVE_TOP_BUCKET.get(n, "other_cmds")] += v
        top += v
    queued = sum(v for c, v in p.out["processCommand"].items() if base(c) == "queueMultiCommand")
    b["queue"] += queued
    b["read_parse"] = p.incl_all("readQueryFromClient") - p.incl_all("processCommand")
    b["dispatch"] = p.incl_all("processCommand") - queued - sum(
        p.out["call"][c] for c in p.out["call"] if base(c).endswith("Command"))
    b["write"] = p.incl_all("writeToClient")
    b["other"] = p.total - exe - top - queued - b["read_parse"] - b["dispatch"] - b["write"]
    touch = {f for f in p.self.keys() | p.into.keys() if base(f) == "touchWatchedKey"}
    info = {"touch": sum(v for s in touch for c, v in p.into[s].items() if c not in touch)}
    return {"kind": "native", "total": p.total, "summary": p.summary,
            "fcall": p.incl_all("fcallCommand"), "exec": exe,
            "xadd": p.incl_all("xaddCommand"), "buckets": dict(b), "cmds": dict(cmds),
            "info": info}


def feed(sock, stream, key, out, first="0", count="-1"):
    first, count = int(first), int(count)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
    import rx  # noqa: E402  (tests/integration/rx.py)
    c = rx.Client(sock)
    n = 0
    kb = key.encode()
    with open(out, "wb") as f:
        for i, (_, kv) in enumerate(c.xrange(stream)):
            if i < first:
                continue
            if count >= 0 and n == count:
                break
            args = [b"XADD", kb, b"*"]
            for name, value in kv:
                args.append(name.encode("utf-8", "surrogateescape"))
                args.append(value.encode("utf-8", "surrogateescape"))
            f.write(b"*%d\r\n" % len(args))
            for a in args:
                f.write(b"$%d\r\n%s\r\n" % (len(a), a))
            n += 1
    print(n)


ROWS = [
    # key, label, indent
    ("fcall", "FCALL outbox_relay_publish, in all (fcallCommand)", 0),
    ("fcall.args_to_lua", "KEYS/ARGV into Lua tables (luaCreateArray: lua_pushlstring)", 1),
    ("fcall.lua", "Lua interpreter (VM, string/table library, GC)", 1),
    ("fcall.glue", "redis.call arguments Lua -> Redis objects, cleanup", 1),
    ("fcall.dispatch", "redis.call dispatch (scriptCall, lookup, ACL, call())", 1),
    ("fcall.reply_to_lua", "command replies into Lua values (parseReply)", 1),
    ("fcall.cmd.xadd", "XADD (xaddCommand)", 1),
    ("fcall.cmd.dedup", "dedup: HSETNX HEXISTS HGET HSET EXPIREAT EXISTS TIME", 1),
    ("fcall.cmd.index", "dedup index: HSCAN HDEL", 1),
    ("fcall.cmd.watermark", "watermark: GET SET", 1),
    ("fcall.cmd.other", "other commands called by the function", 1),
    ("fcall.reply", "FCALL's reply to the client (luaReplyToRedisReply)", 1),
    ("fcall.other", "other inside FCALL (function lookup, run setup)", 1),
    ("main", "XADD (xaddCommand)", 0),
    ("read_parse", "read + parse the query, free its arguments", 0),
    ("dispatch", "command dispatch (processCommand, call())", 0),
    ("write", "write replies to the socket (writeToClient)", 0),
    ("other_cmds", "other commands (FUNCTION LOAD, INFO, PING: once a run)", 0),
    ("other", "other (event loop, beforeSleep, cron)", 0),
]


NATIVE_ROWS = [
    ("exec", "EXEC, in all (execCommand)", 0),
    ("exec.cmd.xadd", "XADD (xaddCommand)", 1),
    ("exec.cmd.dedup_write", "dedup writes: HSET HDEL EXPIREAT (shards and index)", 1),
    ("exec.cmd.watermark", "watermark: SET", 1),
    ("exec.cmd.other", "other commands inside EXEC", 1),
    ("exec.dispatch", "call() of each queued command (bookkeeping, propagation)", 1),
    ("exec.free_args", "free the queued commands' arguments (freeClientMultiState)", 1),
    ("exec.watch", "WATCH check/release (isWatchedKeyExpired, unwatchAllKeys)", 1),
    ("exec.other", "other inside EXEC (ACL check of each command, reply)", 1),
    ("main", "XADD (xaddCommand)", 0),
    ("queue", "MULTI, queuing each command (queueMultiCommand)", 0),
    ("watch", "WATCH UNWATCH (watchCommand, unwatchCommand)", 0),
    ("getset", "GET/SET outside MULTI (watermark GET, slot record)", 0),
    ("type_time", "TYPE TIME", 0),
    ("dedup_read", "dedup reads: HMGET HGETALL EXISTS (shards and index)", 0),
    ("read_parse", "read + parse the query, free its arguments", 0),
    ("dispatch", "command dispatch (processCommand, call())", 0),
    ("write", "write replies to the socket (writeToClient)", 0),
    ("other_cmds", "other commands (FUNCTION LOAD, INFO, PING: once a run)", 0),
    ("other", "other (event loop, beforeSleep, cron)", 0),
]


def report_native(r, x, n, cpu_path=None):
    """The table for the relay on --publish native (left) and the bare XADD (right)."""
    def val(d, k):
        return d.get("exec", 0) if k == "exec" else d["buckets"].get(k, 0)

    print("%-62s %12s %6s %12s %6s" % ("Redis instructions per event", "native", "%", "bare XADD", "%"))
    for k, label, ind in NATIVE_ROWS:
        rv, xv = val(r, k), val(x, k)
        bare_side = k in ("main", "read_parse", "dispatch", "write", "other_cmds", "other")
        rs = "%12.0f %5.1f%%" % (rv / n, 100.0 * rv / r["total"]) if k != "main" else "%12s %6s" % ("", "")
        xs = "%12.0f %5.1f%%" % (xv / n, 100.0 * xv / x["total"]) if bare_side else "%12s %6s" % ("", "")
        print(("%-62s %s %s" % (("  " * ind + label)[:62], rs, xs)).rstrip())
    print("%-62s %12.0f %5.1f%% %12.0f %5.1f%%" % ("whole redis-server process", r["total"] / n, 100.0,
                                                    x["total"] / n, 100.0))
    t = r.get("info", {}).get("touch", 0)
    print("%-62s %12.0f %5.1f%%" % ("  of which touchWatchedKey, inside the writes' lines", t / n,
                                     100.0 * t / r["total"]))
    print()
    print("native total / bare XADD total:              %6.2f" % (r["total"] / x["total"]))
    print("execCommand / bare XADD's xaddCommand:       %6.2f" % (r.get("exec", 0) / max(1, x["xadd"])))
    print("XADD inside EXEC / bare XADD's xaddCommand:  %6.2f" %
          (r["buckets"].get("exec.cmd.xadd", 0) / max(1, x["xadd"])))
    calls = r.get("calls", {})
    for title, top in (("commands run inside EXEC", False), ("commands sent outside MULTI", True)):
        print()
        print(title + ": instructions per event (calls per event from INFO commandstats: "
              "inside and outside together)")
        for c, v in sorted(r["cmds"].items(), key=lambda kv: -kv[1]):
            if c.startswith("top:") != top:
                continue
            name = c[4:] if top else c
            name = name[:-len("Command")].lower()
            cp = calls.get(name)
            print("  %-12s %8.0f %s" % (name.upper(), v / n,
                                        "(%.3f calls/event)" % (cp / n) if cp else ""))
    report_cpu(cpu_path, "native")


def report_cpu(cpu_path, label):
    """Redis CPU per event from the runs without valgrind (cpu.json), if any."""
    if not cpu_path or not os.path.exists(cpu_path):
        return
    c = json.load(open(cpu_path))
    print()
    print("Redis CPU (INFO used_cpu_user+used_cpu_sys, runs without valgrind; NOISY on a busy machine):")
    print("  %s: %.2f us/event   bare XADD: %.2f us/event   ratio %.2f" %
          (label, c["relay_us"], c["bare_us"], c["relay_us"] / c["bare_us"] if c["bare_us"] else 0))
    if c.get("rb_us"):
        print("  redis-benchmark -P 64 XADD of one of those entries (issue 24's baseline): %.2f us/event,"
              " %s ratio %.2f" % (c["rb_us"], label, c["relay_us"] / c["rb_us"]))


def entry(sock, stream, index):
    """One entry of STREAM as XADD's field/value arguments, NUL-terminated, on stdout."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
    import rx  # noqa: E402  (tests/integration/rx.py)
    for i, (_, kv) in enumerate(rx.Client(sock).xrange(stream)):
        if i == int(index):
            out = sys.stdout.buffer
            for name, value in kv:
                out.write(name.encode("utf-8", "surrogateescape") + b"\0")
                out.write(value.encode("utf-8", "surrogateescape") + b"\0")
            return 0
    return 1


def report(relay_path, bare_path, events, cpu_path=None):
    r = json.load(open(relay_path))
    x = json.load(open(bare_path))
    n = float(events)
    if r.get("kind") == "native":
        report_native(r, x, n, cpu_path)
        return

    def val(d, k):
        return d["fcall"] if k == "fcall" else d["buckets"].get(k, 0)

    print("%-62s %12s %6s %12s %6s" % ("Redis instructions per event", "publish fn", "%", "bare XADD", "%"))
    for k, label, ind in ROWS:
        rv, xv = val(r, k), val(x, k)
        if k.startswith("fcall") and r["fcall"] == 0:
            continue
        rs = "%12.0f %5.1f%%" % (rv / n, 100.0 * rv / r["total"]) if (k != "main") else "%12s %6s" % ("", "")
        xs = "%12.0f %5.1f%%" % (xv / n, 100.0 * xv / x["total"]) if not k.startswith("fcall") else "%12s %6s" % ("", "")
        print(("%-62s %s %s" % (("  " * ind + label)[:62], rs, xs)).rstrip())
    print("%-62s %12.0f %5.1f%% %12.0f %5.1f%%" % ("whole redis-server process", r["total"] / n, 100.0,
                                                    x["total"] / n, 100.0))
    inf = r.get("info", {})
    if inf:
        print("%-62s %12.0f %5.1f%%" % ("  of which Lua's GC (luaC_step), spread over the lines above",
                                         inf["lua_gc"] / n, 100.0 * inf["lua_gc"] / r["total"]))
        print("%-62s %12.0f %5.1f%%" % ("  of which Lua string creation (luaS_newlstr), likewise",
                                         inf["lua_newstr"] / n, 100.0 * inf["lua_newstr"] / r["total"]))
    print()
    print("publish fn total / bare XADD total:          %6.2f" % (r["total"] / x["total"]))
    print("fcallCommand / bare XADD's xaddCommand:      %6.2f" % (r["fcall"] / max(1, x["xadd"])))
    print("XADD inside the fn / bare XADD's xaddCommand: %5.2f" %
          (r["buckets"].get("fcall.cmd.xadd", 0) / max(1, x["xadd"])))
    print()
    print("commands the function called: instructions per event (calls per event from INFO commandstats)")
    calls = r.get("calls", {})
    for c, v in sorted(r["cmds"].items(), key=lambda kv: -kv[1]):
        if c.startswith("top:"):
            continue
        name = c[:-len("Command")].lower()
        cp = calls.get(name)
        print("  %-12s %8.0f %s" % (name.upper(), v / n,
                                    "(%.3f calls/event, %.0f instr/call)" % (cp / n, v / cp) if cp else ""))
    report_cpu(cpu_path, "publish fn")


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    if argv[1] == "feed":
        feed(*argv[2:8])
    elif argv[1] == "entry":
        return entry(*argv[2:5])
    elif argv[1] == "cpu":
        report_cpu(argv[2], argv[3])
    elif argv[1] == "analyze":
        kind = argv[3] if len(argv) > 3 else "relay"
        d = analyze_native(argv[2]) if kind == "native" else analyze(argv[2], kind)
        if len(argv) > 4:  # INFO commandstats file: calls per command
            calls = {}
            for line in open(argv[4]):
                m = re.match(r"cmdstat_([a-z|]+):calls=(\d+)", line)
                if m:
                    calls[m.group(1)] = int(m.group(2))
            d["calls"] = calls
        json.dump(d, sys.stdout)
        print()
    elif argv[1] == "report":
        report(*argv[2:6])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
