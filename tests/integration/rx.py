#!/usr/bin/env python3
"""rx.py - minimal RESP2 client for the integration tests (no redis module needed).

Reads Redis Streams exactly, without the ambiguity of redis-cli --raw output.
SOCK is a unix socket path, or HOST:PORT for TCP (e.g. 127.0.0.1:21000, one node
of a Redis Cluster: SCAN then only sees that node's keys; a MOVED reply is
followed to the node it names).

  rx.py SOCK streams [PATTERN]         stream keys matching PATTERN (default *), sorted
  rx.py SOCK fields STREAM F1 [F2..]   one TSV line per entry: values of F1.. (tab and
                                       newline escaped as \\t \\n, backslashes kept
                                       as is; a missing field prints <MISSING>)
  rx.py SOCK entries STREAM            one JSON line per entry:
                                       {"eid": "...", "fields": [[name, value], ...]}
  rx.py SOCK ids PATTERN [EXCLUDE..]   the "id" field of every entry of every stream matching
                                       PATTERN except the EXCLUDE keys, one per line, streams
                                       in key order, entries in stream order; an entry without
                                       an id field prints <MISSING>
  rx.py SOCK sids PATTERN [EXCLUDE..]  like ids, each line "STREAM<tab>ID"
  rx.py SOCK cmd ARG..                 run one command, print the reply as JSON
"""
import json
import os
import socket
import sys


class RespError(Exception):
    pass


class Client:
    follow_moved = True  # False: a MOVED reply raises RespError

    def __init__(self, path):
        if not path.startswith("/") and ":" in path:
            # HOST:PORT (TCP, e.g. a Redis Cluster node on loopback)
            host, port = path.rsplit(":", 1)
            self.s = socket.create_connection((host, int(port)), timeout=30)
        else:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(30)
            self.s.connect(path)
        self.f = self.s.makefile("rb", buffering=1 << 20)
        if os.environ.get("REDIS_PASSWORD"):
            self.call("AUTH", os.environ["REDIS_PASSWORD"])

    def _reply(self):
        line = self.f.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by redis")
        t, rest = line[:1], line[1:-2]
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed by redis")
            return data[:-2].decode("utf-8", "surrogateescape")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        raise RespError("protocol error: %r" % line)

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        req = b"".join(out)
        for _ in range(5):
            self.s.sendall(req)
            r = self._reply()
            # Redis Cluster: follow a MOVED redirection (like redis-cli -c).
            msg = str(r).split() if isinstance(r, RespError) else []
            if len(msg) != 3 or msg[0] != "MOVED" or not self.follow_moved:
                break
            self.s.close()
            self.__init__(msg[2])
        if isinstance(r, RespError):
            raise r
        return r

    def streams(self, pattern):
        keys, cursor = set(), "0"
        while True:
            cursor, batch = self.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000, "TYPE", "stream")
            keys.update(batch)
            if cursor == "0":
                return sorted(keys)

    def xrange(self, key, page=10000):
        start = "-"
        while True:
            batch = self.call("XRANGE", key, start, "+", "COUNT", page)
            for eid, kv in batch:
                yield eid, [(kv[i], kv[i + 1]) for i in range(0, len(kv), 2)]
            if len(batch) < page:
                return
            start = "(" + batch[-1][0]


def esc(v):
    return v.replace("\t", "\\t").replace("\n", "\\n")


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    c = Client(argv[1])
    op, args = argv[2], argv[3:]
    out = sys.stdout
    if op == "streams":
        for k in c.streams(args[0] if args else "*"):
            out.write(k + "\n")
    elif op == "fields":
        for _, kv in c.xrange(args[0]):
            d = dict(kv)
            out.write("\t".join(esc(d[f]) if f in d else "<MISSING>" for f in args[1:]) + "\n")
    elif op == "entries":
        for eid, kv in c.xrange(args[0]):
            out.write(json.dumps({"eid": eid, "fields": kv}) + "\n")
    elif op == "ids":
        exclude = set(args[1:])
        for k in c.streams(args[0]):
            if k in exclude:
                continue
            for _, kv in c.xrange(k):
                out.write(dict(kv).get("id", "<MISSING>") + "\n")
    elif op == "sids":
        exclude = set(args[1:])
        for k in c.streams(args[0]):
            if k in exclude:
                continue
            for _, kv in c.xrange(k):
                out.write(k + "\t" + dict(kv).get("id", "<MISSING>") + "\n")
    elif op == "cmd":
        out.write(json.dumps(c.call(*args)) + "\n")
    else:
        sys.stderr.write("unknown operation %r\n" % op)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, RespError) as e:
        sys.stderr.write("rx.py: %s\n" % e)
        sys.exit(1)
