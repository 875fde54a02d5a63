#!/usr/bin/python3
"""A consumer of one outbox-relay stream: XREADGROUP, an idempotent effect in
PostgreSQL, XACK after the commit, XAUTOCLAIM of dead consumers' entries, and
a dead-letter stream for entries that keep failing. See README.md here.

Needs redis-py (4.x) and psycopg2 (Debian: python3-redis python3-psycopg2).
"""
import argparse
import json
import logging
import os
import signal
import socket
import time

import psycopg2
import psycopg2.sql
import redis

log = logging.getLogger("consumer")
stopping = False  # set by SIGTERM/SIGINT; checked between entries


def pause(seconds):
    """Sleep, but return early (True) once asked to stop."""
    end = time.monotonic() + seconds
    while not stopping and time.monotonic() < end:
        time.sleep(0.05)
    return stopping


# The idempotency key is the event's "id" field: the relay publishes an id once
# per stream within its dedup window, but a consumer group delivers
# at-least-once, so the same event may reach this worker again.
SCHEMA = """CREATE TABLE IF NOT EXISTS {table} (
    event_id     text PRIMARY KEY,
    stream       text NOT NULL,
    entry_id     text NOT NULL,
    event_type   text,
    aggregate_id text,
    processed_at timestamptz NOT NULL DEFAULT now())"""
INSERT = """INSERT INTO {table} (event_id, stream, entry_id, event_type, aggregate_id)
    VALUES (%s, %s, %s, %s, %s) ON CONFLICT (event_id) DO NOTHING"""

# TEST HOOKS, for tests/integration/66_example_python.sh only: leave unset.
TEST_FAIL_ID = os.environ.get("OUTBOX_EXAMPLE_TEST_FAIL_ID")  # this event id always fails
TEST_SLEEP = float(os.environ.get("OUTBOX_EXAMPLE_TEST_SLEEP", "0"))  # a slow handler and ack


def apply_effect(cur, event_id, fields):
    """The business effect. Runs inside the transaction that recorded the event
    id, only the first time the id is seen: put your own writes here."""
    if TEST_FAIL_ID and event_id == TEST_FAIL_ID:
        raise RuntimeError("test hook: OUTBOX_EXAMPLE_TEST_FAIL_ID matches event %s" % TEST_FAIL_ID)


class Consumer:
    def __init__(self, args):
        self.a = args
        self.r = redis.Redis.from_url(args.redis_url, decode_responses=True)
        self.pg = None
        self.insert = psycopg2.sql.SQL(INSERT).format(table=psycopg2.sql.Identifier(args.effects_table))
        self.next_claim = 0.0

    def connect_pg(self):
        while not stopping:
            try:
                self.pg = psycopg2.connect(self.a.pg_dsn)
                with self.pg, self.pg.cursor() as cur:
                    cur.execute(psycopg2.sql.SQL(SCHEMA).format(
                        table=psycopg2.sql.Identifier(self.a.effects_table)))
                return
            except psycopg2.OperationalError as e:
                log.warning("PostgreSQL: %s; retrying", str(e).strip())
                pause(self.a.retry_delay)

    def create_group(self):
        # From 0, like the relay's --group: a group created late misses nothing.
        try:
            self.r.xgroup_create(self.a.stream, self.a.group, id="0", mkstream=True)
        except redis.ResponseError as e:
            if not str(e).startswith("BUSYGROUP"):
                raise

    def deliveries(self, entry_id):
        """How often the group has delivered this entry (XPENDING, extended form)."""
        p = self.r.xpending_range(self.a.stream, self.a.group, entry_id, entry_id, 1)
        return p[0]["times_delivered"] if p else 0

    def dead_letter(self, entry_id, fields, count, error):
        # XADD and XACK in one MULTI/EXEC: never acknowledged without being
        # dead-lettered. EXEC discards everything when a command is refused
        # while queued (OOM, NOPERM), but does not roll back a command that
        # fails while running: WATCH + TYPE rule out the one way XADD can
        # (WRONGTYPE). The event's fields go along: the entry itself may be
        # trimmed once acknowledged.
        entry = {"stream": self.a.stream, "entry_id": entry_id, "group": self.a.group,
                 "consumer": self.a.consumer, "deliveries": count, "error": error,
                 "event": json.dumps(fields)}
        with self.r.pipeline() as p:
            while True:
                try:
                    p.watch(self.a.dlq)
                    if p.type(self.a.dlq) not in ("none", "stream"):
                        raise RuntimeError("%s is not a stream: cannot dead-letter %s" % (self.a.dlq, entry_id))
                    p.multi()
                    p.xadd(self.a.dlq, entry)
                    p.xack(self.a.stream, self.a.group, entry_id)
                    p.execute()
                    break
                except redis.WatchError:
                    continue  # the DLQ changed between WATCH and EXEC: again
        log.error("dead-lettered %s (event %s) to %s after %d deliveries: %s",
                  entry_id, fields.get(self.a.id_field), self.a.dlq, count, error)

    def handle(self, entry_id, fields):
        """Apply one entry (unless applied before) and acknowledge it; raises
        when the handler failed."""
        if not fields:  # trimmed away while pending: nothing left to apply
            self.r.xack(self.a.stream, self.a.group, entry_id)
            return
        event_id = fields.get(self.a.id_field)
        while True:
            try:
                with self.pg, self.pg.cursor() as cur:  # one transaction: commit or roll back
                    cur.execute(self.insert, (event_id, self.a.stream, entry_id,
                                              fields.get("event_type"), fields.get("aggregate_id")))
                    first = cur.rowcount == 1
                    if first:
                        apply_effect(cur, event_id, fields)
                    if TEST_SLEEP:
                        time.sleep(TEST_SLEEP)
                break
            except Exception as e:
                if not self.pg.closed:
                    raise  # the handler failed: process() counts it against the entry
                # The connection, not the event, failed: retry in place (the
                # delivery count stays as it is), no poison verdict.
                log.warning("PostgreSQL: %s; reconnecting", str(e).strip())
                if pause(self.a.retry_delay):
                    raise SystemExit(0)  # the entry stays pending for the next start
                self.connect_pg()
        if not first:
            log.info("event %s (entry %s) already applied: acknowledging it again", event_id, entry_id)
        if TEST_SLEEP:
            time.sleep(TEST_SLEEP)  # widens the commit-to-XACK window a crash may hit
        # After the commit: a crash right here repeats a no-op on redelivery.
        self.r.xack(self.a.stream, self.a.group, entry_id)

    def process(self, entries, redelivered):
        """Handle a batch; False when an entry failed and stays pending."""
        ok = True
        for entry_id, fields in entries:
            if stopping:
                break  # the rest stays pending: read first on the next start
            if redelivered:
                # Delivered more than N times with no verdict: the worker died
                # handling it (e.g. killed for memory). Dead-letter it unhandled.
                n = self.deliveries(entry_id)
                if n > self.a.max_deliveries:
                    self.dead_letter(entry_id, fields, n, "no outcome after %d deliveries (worker died?)" % (n - 1))
                    continue
            try:
                self.handle(entry_id, fields)
            except Exception as e:  # the handler failed: count it against the entry
                n = self.deliveries(entry_id)
                log.warning("entry %s (event %s), delivery %d: %s", entry_id, fields.get(self.a.id_field), n, e)
                if n >= self.a.max_deliveries:
                    self.dead_letter(entry_id, fields, n, "%s: %s" % (type(e).__name__, e))
                else:
                    ok = False
        return ok

    def claim(self):
        """XAUTOCLAIM entries idle longer than --claim-idle (their consumer died)."""
        cursor, ok = "0-0", True
        while True:
            reply = self.r.xautoclaim(self.a.stream, self.a.group, self.a.consumer,
                                      int(self.a.claim_idle * 1000), cursor, count=self.a.batch)
            cursor, entries = reply[0], reply[1]
            if entries:
                log.info("claimed %d idle entries", len(entries))
                ok = self.process(entries, redelivered=True) and ok
            if cursor == "0-0" or stopping:
                return ok

    def run(self):
        self.create_group()
        self.connect_pg()
        backlog = True  # own pending entries first: those a crash left unacknowledged
        log.info("consuming %s as %s/%s", self.a.stream, self.a.group, self.a.consumer)
        while not stopping:
            if time.monotonic() >= self.next_claim:
                if not self.claim():
                    backlog = True  # claimed entries that failed are now ours to retry
                self.next_claim = time.monotonic() + self.a.claim_idle / 2
            # id 0 re-reads this consumer's pending entries (no blocking); ">" new ones.
            reply = self.r.xreadgroup(self.a.group, self.a.consumer, {self.a.stream: "0" if backlog else ">"},
                                      count=self.a.batch, block=None if backlog else int(self.a.block * 1000))
            entries = reply[0][1] if reply else []
            if backlog and not entries:
                backlog = False
                continue
            if not self.process(entries, redelivered=backlog):
                backlog = True  # retry the failed entries after a pause
                pause(self.a.retry_delay)
        log.info("stopped")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379", help="also unix:///path/redis.sock")
    ap.add_argument("--pg-dsn", required=True, help="libpq DSN of the database the effects go to")
    ap.add_argument("--stream", default="outbox:order")
    ap.add_argument("--group", default="workers")
    ap.add_argument("--consumer", default=socket.gethostname(),
                    help="stable across restarts (pod or host name): a restart then re-reads its pending entries")
    ap.add_argument("--dlq", help="dead-letter stream (default: <stream>:dlq)")
    ap.add_argument("--max-deliveries", type=int, default=5, help="deliveries before an entry is dead-lettered")
    ap.add_argument("--claim-idle", type=float, default=60,
                    help="seconds before another consumer's pending entry is claimed")
    ap.add_argument("--batch", type=int, default=10, help="entries per read")
    ap.add_argument("--block", type=float, default=2, help="seconds a read waits for new entries")
    ap.add_argument("--retry-delay", type=float, default=1, help="seconds before failed entries are retried")
    ap.add_argument("--id-field", default="id", help="the field holding the event id (the relay's --id-column)")
    ap.add_argument("--effects-table", default="consumer_effects")
    args = ap.parse_args()
    args.dlq = args.dlq or args.stream + ":dlq"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # Only set a flag: the entry in hand is finished, then the loop ends. A
    # blocked read returns within --block.
    def on_signal(*_):
        global stopping
        stopping = True

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    Consumer(args).run()


if __name__ == "__main__":
    main()
