#!/usr/bin/env python3
"""oracle.py - the application side of 80_integrity (and tests/soak.sh).

  oracle.py gen DIR PGHOST PGPORT SEED SECONDS
      Commits outbox rows at random until SECONDS have passed or DIR/stop
      exists: WORKERS (3) psql sessions at once, each owning its own
      aggregates (so the commit order of an aggregate's events is the order
      this program issued them: headers.seq grows), transaction shapes from
      one row to thousands, savepoints rolled back, whole transactions rolled
      back, long-open transactions interleaved with the others, logical
      messages (outbox_emit_message, aggregate_type "note", a stream no row
      uses). Values: every column of the test's table (sql/outbox.sql plus
      the nullable columns 80_integrity adds), NULLs, payloads from {} to
      several MiB, control bytes, quotes, backslashes, non-ASCII and
      unusual-but-valid UTF-8, ids of several uuid schemes. The first
      transaction is issue 21's reproducer: event_type E'esc\\x1bape' with a
      100 KB payload, then 30 ordinary rows.
      A session lost (PostgreSQL restarted) is opened again; its transaction
      in flight is "uncertain" (the table says whether it committed).
      Writes DIR/w<k>.jsonl: {"t": "rb", "ids": [...]} rolled back for sure,
      {"t": "ok"|"unsure", "rows": n, "msgs": [...]} per transaction,
      {"t": "msg", ...} each message with its state and fields.

  oracle.py tamper REDIS_SOCK PGHOST PGPORT
      One discrepancy of each kind: a row without an entry, an entry again
      with an earlier commit LSN, an entry whose payload differs from its row,
      an entry without a row (80_integrity checks that verify finds them).

  oracle.py check DIR REDIS_SOCK PGHOST PGPORT [HEALS]
      The checks verify cannot make: no rolled-back row is in the table or any
      stream; every committed message is in outbox:note exactly once with its
      fields, no rolled-back one; each aggregate's events are in the stream in
      the order they were committed (headers.seq grows); every id in the
      streams is a row or a message. Prints one line of counts:
      "oracle: rows=N rolled_back=N messages=N lost=N duplicated=N corrupted=N
      reordered=N phantom=N messages_lost_in_slot_gaps=N reordered_republished=N"
      (how many of the reordered entries were republished ones) and exits 1 when
      any of lost..phantom is not 0. With HEALS > 0 (slots dropped and
      healed) a committed message missing is counted in the last number, not
      as lost: a message lives only in the WAL, and the dropped slot's gap
      took it (README, "What republish cannot heal").
"""
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rx import Client  # noqa: E402

WORKERS = 3
TYPES = ["order", "user", "payment", "inventory"]

TRICKY = [
    "", " ", "'", "''", '"', '\\', '\\\\"', "\\u0000", "a\tb\nc\r", "\x01\x02\x1f", "\x7f",
    "esc\x1bape", "é", "日本語", "🎉", "\ufeff", "\u2028\u2029", "\ue000", "\U0010ffff",
    "a\u0301", "\uffff", "{\"k\": 1}", "null", "$$", "$J$", "%s %d", "\x08\x0c",
]


def sql_text(s):
    """A PostgreSQL E'' literal of s (no NUL)."""
    out = ["E'"]
    for ch in s:
        o = ord(ch)
        if ch == "'":
            out.append("\\'")
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        else:
            out.append(ch)
    out.append("'")
    return "".join(out)


def jlit(obj):
    return sql_text(json.dumps(obj, ensure_ascii=False)) + "::jsonb"


class Gen:
    def __init__(self, k, seed, d, host, port, deadline, stop):
        self.k = k
        self.r = random.Random(seed * 1000 + k)
        self.f = open(os.path.join(d, "w%d.jsonl" % k), "a", buffering=1)
        self.host, self.port = host, port
        self.deadline, self.stop = deadline, stop
        self.p = None
        self.n = 0
        self.counter = 0
        self.seq = {}
        self.big = 0

    # ---- ids of several schemes (all uuids: the table's id column is uuid) ----
    def new_id(self):
        self.counter += 1
        x = self.r.random()
        if x < 0.4:
            return str(uuid.UUID(int=self.r.getrandbits(128), version=4))
        if x < 0.6:  # v1 with a fixed node: bytes that repeat
            return str(uuid.uuid1(node=0x0242AC110002 + self.k, clock_seq=self.k))
        if x < 0.8:  # v7: time-ordered
            ms = int(time.time() * 1000)
            v = (ms << 80) | (0x7 << 76) | (self.r.getrandbits(12) << 64) | (0b10 << 62) | self.r.getrandbits(62)
            return str(uuid.UUID(int=v))
        # sequential counter: nothing varies but the last bytes
        return "%08x-0000-4000-8000-%012x" % (self.k + 1, self.counter)

    def text(self, maxlen=40):
        r = self.r
        parts = [r.choice(TRICKY) for _ in range(r.randrange(0, 4))]
        parts.append("".join(chr(r.randrange(0x20, 0x7F)) for _ in range(r.randrange(0, maxlen))))
        r.shuffle(parts)
        return "".join(parts).replace("\x00", "")

    def payload(self):
        r = self.r
        x = r.random()
        if x < 0.05:
            return r.choice([{}, "", 0, [], None, 1.5, "plain", [1, "two", None]])
        if x < 0.75:
            size = r.randrange(0, 200)
        elif x < 0.93:
            size = r.randrange(1024, 64 * 1024)
        elif x < 0.99 or self.big >= 3:
            size = r.randrange(64 * 1024, 1024 * 1024)
        else:
            self.big += 1
            size = r.randrange(1024 * 1024, 4 * 1024 * 1024)
        return {"s": self.text(), "n": None, "f": r.choice([1.5, -0.0, 1e300, 12, True]),
                "pad": self.text(20) + "x" * size, "nested": {"a": [self.text(8)]}}

    def row(self, agg_type=None, agg_id=None, event_type=None, payload=None):
        r = self.r
        rid = self.new_id()
        agg_type = agg_type or r.choice(TYPES)
        agg_id = agg_id or "w%d-%d" % (self.k, r.randrange(12))
        s = self.seq.get(agg_id, 0) + 1
        self.seq[agg_id] = s
        et = event_type if event_type is not None else self.text(30)
        pl = payload if payload is not None else self.payload()
        hd = {"seq": s, "agg": agg_id, "h": self.text(10)}

        def maybe(v):
            return "NULL" if r.random() < 0.3 else v

        note = maybe(sql_text(self.text(60)))
        amount = maybe(r.choice(["12.5000", "-0.0001", "1e20", "'NaN'", "0", "123456789.123456789"]))
        qty = maybe(r.choice(["0", "-9223372036854775808", "9223372036854775807", "42"]))
        flag = maybe(r.choice(["true", "false"]))
        blob = maybe("'\\x%s'::bytea" % "".join("%02x" % r.randrange(256) for _ in range(r.randrange(0, 64))))
        ratio = maybe(r.choice(["0.1", "-1.5e-300", "'Infinity'", "'-Infinity'", "'NaN'", "3"]))
        tags = maybe(r.choice(["'{}'", "ARRAY['a', 'b c', 'q\"x', NULL]", "ARRAY[" + sql_text(self.text(10)) + "]"]))
        sql = ("INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers, "
               "note, amount, qty, flag, blob, ratio, tags) VALUES ('%s', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);"
               % (rid, sql_text(agg_type), sql_text(agg_id), sql_text(et), jlit(pl), jlit(hd),
                  note, amount, qty, flag, blob, ratio, tags))
        return rid, sql

    def bulk(self, n):
        """n rows in one INSERT ... SELECT (sequential ids, one aggregate each)."""
        base = self.counter + 1
        self.counter += n
        agg_id = "w%d-%d" % (self.k, self.r.randrange(12))
        s0 = self.seq.get(agg_id, 0)
        self.seq[agg_id] = s0 + n
        t = self.r.choice(TYPES)
        ids = ["%08x-0000-4000-8000-%012x" % (self.k + 1, base + g - 1) for g in range(1, n + 1)]
        sql = ("INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers) "
               "SELECT format('%%s-0000-4000-8000-%%s', lpad(to_hex(%d), 8, '0'), lpad(to_hex(%d + g - 1), 12, '0'))::uuid, "
               "%s, %s, 'bulk', jsonb_build_object('g', g, 'pad', repeat('b', g %% 300)), "
               "jsonb_build_object('seq', %d + g, 'agg', %s) FROM generate_series(1, %d) g;"
               % (self.k + 1, base, sql_text(t), sql_text(agg_id), s0, sql_text(agg_id), n))
        return ids, sql

    def message(self):
        mid = str(uuid.UUID(int=self.r.getrandbits(128), version=4))
        et = self.text(20)
        pl = {"m": self.text(30), "pad": "m" * self.r.randrange(0, 3000)}
        sql = ("SELECT outbox_emit_message('note', %s, %s, %s, '{}'::jsonb) \\gset m_\n"
               % (sql_text("w%d" % self.k), sql_text(et), jlit(pl)))
        # outbox_emit_message makes its own id: learn it from psql's output instead
        return mid, et, pl, sql

    # ---- the session ----
    def open(self):
        while time.time() < self.deadline and not os.path.exists(self.stop):
            env = dict(os.environ, PGCLIENTENCODING="UTF8", PGOPTIONS="-c client_min_messages=error")
            self.p = subprocess.Popen(
                ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=0", "-h", self.host, "-p",
                 str(self.port), "-U", "postgres", "-d", "postgres"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            if self.run("SELECT 1;") is not None:
                return True
            self.close()
            time.sleep(0.5)
        return False

    def close(self):
        if self.p:
            try:
                self.p.kill()
                self.p.wait()
            except OSError:
                pass
        self.p = None

    def run(self, sql, partial=None):
        """Send sql, then wait for the marker. The output lines, or None when the session died;
        what the session printed before it died is appended to the list partial."""
        self.n += 1
        mark = "DONE%d" % self.n
        out = partial if partial is not None else []
        try:
            self.p.stdin.write((sql + "\n\\echo " + mark + "\n").encode())
            self.p.stdin.flush()
            while True:
                line = self.p.stdout.readline()
                if not line:
                    return None
                line = line.decode("utf-8", "replace").rstrip("\n")
                if line == mark:
                    return out
                out.append(line)
        except (BrokenPipeError, OSError):
            return None

    def tx(self):
        r = self.r
        stmts, ids, rb, msgs = [], [], [], []
        shape = r.random()
        if self.n_tx == 0 and self.k == 0:
            # issue 21, finding 1: a control byte in a short column, a 100 KB payload, 30 more rows
            i, s = self.row(agg_type="order", event_type="esc\x1bape", payload={"pad": "x" * 100000})
            ids.append(i)
            stmts.append(s)
            for j in range(30):
                i, s = self.row(agg_type="order", payload={"k": j, "pad": "y" * 2000})
                ids.append(i)
                stmts.append(s)
        elif shape < 0.02:
            i, s = self.bulk(r.randrange(500, 3000))
            ids += i
            stmts.append(s)
        else:
            n = 1 if shape < 0.5 else r.randrange(2, 40)
            for _ in range(n):
                x = r.random()
                if x < 0.08:
                    # a savepoint rolled back: its rows never happened
                    sub = []
                    sp = ["SAVEPOINT s;"]
                    for _ in range(r.randrange(1, 4)):
                        i, s = self.row()
                        sub.append(i)
                        sp.append(s)
                    sp.append("ROLLBACK TO SAVEPOINT s;")
                    rb += sub
                    stmts += sp
                elif x < 0.13:
                    mid, et, pl, s = self.message()
                    msgs.append({"et": et, "pl": pl})
                    stmts.append(s + "\\echo MSG :m_outbox_emit_message")
                elif x < 0.15:
                    stmts.append("SELECT pg_sleep(%.2f);" % (r.random() * 0.8))
                else:
                    i, s = self.row()
                    ids.append(i)
                    stmts.append(s)
        rollback = r.random() < 0.08
        self.n_tx += 1
        body = "BEGIN;\n" + "\n".join(stmts) + "\nSELECT 'OK%d';\n%s" % (self.n_tx, "ROLLBACK;" if rollback else "COMMIT;")
        printed = []
        out = self.run(body, printed)
        # A session that died in COMMIT (PostgreSQL stopped in immediate mode) may have committed:
        # the ids of the messages it emitted before are known, and the check accepts them or their
        # absence ("unsure"). Dropping them made a committed message an entry of no known id.
        mids = [ln[4:] for ln in printed if ln.startswith("MSG ")]
        for m, mid in zip(msgs, mids):
            m["id"] = mid
        if out is None:
            state = "unsure"
            self.close()
        elif rollback or ("OK%d" % self.n_tx) not in out:
            state = "rb"
        else:
            state = "ok"
        if state == "rb":
            rb += ids
            ids = []
        self.f.write(json.dumps({"t": "rb", "ids": rb}) + "\n")
        self.f.write(json.dumps({"t": state, "rows": len(ids), "ids": ids if state == "ok" else ids}) + "\n")
        for m in msgs:
            if "id" in m:
                self.f.write(json.dumps({"t": "msg", "state": state, "id": m["id"], "et": m["et"], "pl": m["pl"]}) + "\n")

    def loop(self):
        self.n_tx = 0
        while time.time() < self.deadline and not os.path.exists(self.stop):
            if self.p is None and not self.open():
                break
            self.tx()
            time.sleep(self.r.random() * 0.05)
        if self.p:
            try:
                self.p.stdin.close()
                self.p.wait(timeout=30)
            except Exception:
                self.close()
        self.f.close()


def gen(d, host, port, seed, seconds):
    deadline = time.time() + float(seconds)
    stop = os.path.join(d, "stop")
    ws = [Gen(k, int(seed), d, host, port, deadline, stop) for k in range(WORKERS)]
    ts = [threading.Thread(target=w.loop) for w in ws]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    open(os.path.join(d, "gen.done"), "w").close()


def records(d):
    for name in sorted(os.listdir(d)):
        if name.startswith("w") and name.endswith(".jsonl"):
            with open(os.path.join(d, name)) as f:
                for line in f:
                    yield json.loads(line)


def psql_lines(host, port, sql):
    out = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", str(port),
                          "-U", "postgres", "-d", "postgres", "-c", sql], check=True, capture_output=True)
    return [ln for ln in out.stdout.decode().split("\n") if ln]


def check(d, sock, host, port, heals="0"):
    heals = int(heals)
    rolled, msgs, ok_ids = set(), {}, set()
    for rec in records(d):
        if rec["t"] == "rb":
            rolled.update(rec["ids"])
        elif rec["t"] == "ok":
            ok_ids.update(rec["ids"])
        elif rec["t"] == "msg":
            msgs[rec["id"]] = rec
    table = set(psql_lines(host, port, "SELECT id FROM outbox"))
    c = Client(sock)
    lost = dup = corrupted = reordered = phantom = msg_gap = reordered_rp = 0
    problems = {}

    def bad(what):
        kind = what.split(" ")[0] if what.startswith(("rolled", "committed", "entry", "id ", "row ", "message")) else "order"
        problems.setdefault(kind, [])
        if len(problems[kind]) < 5:
            problems[kind].append(what)

    for i in sorted(rolled & table):
        phantom += 1
        bad("rolled-back row %s is in the table" % i)
    for i in sorted(ok_ids - table):
        lost += 1
        bad("committed row %s is not in the table" % i)
    seen, where = {}, {}
    last_seq = {}
    for key in c.streams("outbox:*"):
        if key == "outbox:dead-letter":
            continue
        for eid, kv in c.xrange(key, page=500):
            f = dict(kv)
            i = f.get("id", "<none>")
            seen[i] = seen.get(i, 0) + 1
            where.setdefault(i, key)
            if key == "outbox:note":
                continue
            try:
                h = json.loads(f.get("headers", "null"))
                agg, s = h["agg"], int(h["seq"])
            except Exception:
                continue  # verify judges the fields
            if s <= last_seq.get((key, agg), 0):
                reordered += 1
                rp = "_republished" in f
                reordered_rp += rp
                bad("%s: aggregate %s seq %d after %d (entry %s%s)" % (key, agg, s, last_seq[(key, agg)], eid,
                                                                   ", republished" if rp else ""))
            last_seq[(key, agg)] = max(s, last_seq.get((key, agg), 0))
    for i, n in seen.items():
        if i in rolled:
            phantom += 1
            bad("rolled-back row %s is in a stream" % i)
        elif i not in table and i not in msgs:
            phantom += 1
            bad("entry with id %s (in %s) is neither a row nor a message" % (i, where.get(i)))
        if n > 1:
            dup += 1
            bad("id %s is in the streams %d times" % (i, n))
    for i in table:
        if i not in seen:
            lost += 1
            bad("row %s is in no stream" % i)
    # messages: the committed ones once each, with their fields; rolled-back ones never
    note = {}
    for eid, kv in c.xrange("outbox:note", page=500) if msgs else []:
        f = dict(kv)
        note[f.get("id")] = f
    nmsg = 0
    for i, m in msgs.items():
        got = note.get(i)
        if m["state"] == "rb":
            if got is not None:
                phantom += 1
                bad("rolled-back message %s is in outbox:note" % i)
            continue
        if m["state"] == "ok":
            nmsg += 1
            if got is None:
                if heals:
                    msg_gap += 1  # a dropped slot loses the messages of its gap: nothing can heal them
                else:
                    lost += 1
                    bad("message %s is missing" % i)
                continue
        if got is None:
            continue
        try:
            same = got.get("event_type") == m["et"] and json.loads(got.get("payload")) == m["pl"]
        except Exception:
            same = False
        if not same:
            corrupted += 1
            bad("message %s: fields differ" % i)
    for kind in sorted(problems):
        for p in problems[kind]:
            print("oracle: " + p, file=sys.stderr)
    print("oracle: rows=%d rolled_back=%d messages=%d lost=%d duplicated=%d corrupted=%d reordered=%d phantom=%d"
          " messages_lost_in_slot_gaps=%d reordered_republished=%d"
          % (len(table), len(rolled), nmsg, lost, dup, corrupted, reordered, phantom, msg_gap, reordered_rp))
    return 1 if lost or dup or corrupted or reordered or phantom else 0


def tamper(sock, host, port):
    """Make one discrepancy of each kind verify reports (80_integrity's check of the checker)."""
    c = Client(sock)
    e = None
    for eid, kv in c.xrange("outbox:order", page=50):
        f = dict(kv)
        if "_committed_at" in f and "_republished" not in f:
            e = kv
            break
    f = dict(e)
    # missing: a row no relay will publish (none runs any more)
    psql_lines(host, port, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
               "VALUES ('order', 'tamper-m', 'missing', '{}')")
    # duplicated and reordered: the entry again, with a commit LSN before its aggregate's last
    args = []
    for k, v in e:
        args += [k, "0/1" if k == "_lsn" else v]
    c.call("XADD", "outbox:order", "*", *args)
    # differ: a row whose entry has another payload
    rid = psql_lines(host, port, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                     "VALUES ('order', 'tamper-d', 'differ', '{\"a\": 1}') RETURNING id")[0]
    args = []
    for k, v in e:
        v = {"id": rid, "aggregate_id": "tamper-d", "event_type": "differ", "payload": "{\"a\": 2}"}.get(k, v)
        args += [k, v]
    c.call("XADD", "outbox:order", "*", *args)
    # without a row: an entry whose id is in no row
    c.call("XADD", "outbox:order", "*", "id", str(uuid.uuid4()), "aggregate_id", "tamper-o",
           "_lsn", "FFFF/0", "_committed_at", f["_committed_at"])
    return 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "tamper":
        return tamper(*argv[2:5])
    if len(argv) >= 7 and argv[1] == "gen":
        gen(*argv[2:7])
        return 0
    if len(argv) >= 6 and argv[1] == "check":
        return check(*argv[2:7])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
