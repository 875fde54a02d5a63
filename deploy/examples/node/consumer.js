#!/usr/bin/env node
// A consumer of one outbox-relay stream: XREADGROUP, an idempotent effect in
// PostgreSQL, XACK after the commit, XAUTOCLAIM of dead consumers' entries,
// and a dead-letter stream for entries that keep failing. See README.md here.
//
// Needs Node.js 18 or later, ioredis 5 and pg 8 (both vendored here: npm ci
// --offline). The Node twin of ../python/consumer.py: same options,
// same table, same dead-letter fields.
'use strict';

const os = require('os');
const { setTimeout: sleep } = require('timers/promises');
const Redis = require('ioredis');
const pg = require('pg');

let stopping = false; // set by SIGTERM/SIGINT; checked between entries

function log(level, msg) {
  // The Python example's format: "2026-01-02 03:04:05,678 INFO message".
  const t = new Date().toISOString().replace('T', ' ').replace('.', ',').slice(0, 23);
  process.stderr.write(`${t} ${level} ${msg}\n`);
}

// Sleep, but return early (true) once asked to stop.
async function pause(seconds) {
  const end = Date.now() + seconds * 1000;
  while (!stopping && Date.now() < end) await sleep(Math.min(50, end - Date.now()));
  return stopping;
}

// The idempotency key is the event's "id" field: the relay publishes an id once
// per stream within its dedup window, but a consumer group delivers
// at-least-once, so the same event may reach this worker again.
const SCHEMA = (table) => `CREATE TABLE IF NOT EXISTS ${table} (
    event_id     text PRIMARY KEY,
    stream       text NOT NULL,
    entry_id     text NOT NULL,
    event_type   text,
    aggregate_id text,
    processed_at timestamptz NOT NULL DEFAULT now())`;
const INSERT = (table) => `INSERT INTO ${table} (event_id, stream, entry_id, event_type, aggregate_id)
    VALUES ($1, $2, $3, $4, $5) ON CONFLICT (event_id) DO NOTHING`;
const ident = (name) => '"' + name.replace(/"/g, '""') + '"';

// TEST HOOKS, for tests/integration/57_example_node.sh only: leave unset.
const TEST_FAIL_ID = process.env.OUTBOX_EXAMPLE_TEST_FAIL_ID; // this event id always fails
const TEST_SLEEP = Number(process.env.OUTBOX_EXAMPLE_TEST_SLEEP || 0); // a slow handler and ack

// The business effect. Runs inside the transaction that recorded the event
// id, only the first time the id is seen: put your own writes here, through
// `client` (e.g. await client.query('UPDATE ...', [...])).
async function applyEffect(client, eventId, fields) {
  if (TEST_FAIL_ID && eventId === TEST_FAIL_ID) {
    throw new Error(`test hook: OUTBOX_EXAMPLE_TEST_FAIL_ID matches event ${TEST_FAIL_ID}`);
  }
}

// --pg-dsn: a URL (postgresql://...) or libpq's keyword=value form, as in
// psycopg2 ("host=/run/postgresql dbname=app user=billing"). Unset keys come
// from PGHOST, PGUSER, PGPASSWORD, ... and ~/.pgpass, as with libpq.
function pgConfig(dsn) {
  if (/^postgres(ql)?:\/\//.test(dsn)) return { connectionString: dsn };
  const names = { dbname: 'database', application_name: 'application_name', host: 'host', port: 'port',
    user: 'user', password: 'password' };
  const config = {};
  const re = /\s*([a-z_]+)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))/gy;
  let m;
  let end = 0;
  while ((m = re.exec(dsn)) !== null) {
    end = re.lastIndex;
    const value = m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : m[3];
    if (m[1] === 'connect_timeout') config.connectionTimeoutMillis = Number(value) * 1000;
    else if (names[m[1]]) config[names[m[1]]] = m[1] === 'port' ? Number(value) : value;
    else throw new Error(`--pg-dsn: ${m[1]} is not supported here (use a postgresql:// URL)`);
  }
  if (dsn.slice(end).trim()) throw new Error(`--pg-dsn: cannot parse ${dsn.slice(end).trim()}`);
  return config;
}

// Errors of the connection (not of the event): lost, refused, server shut down.
function pgConnectionError(e) {
  return /^(08|57P0)/.test(e.code || '') || ['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ENOENT', 'ETIMEDOUT'].includes(e.code) ||
    /Connection terminated|not queryable|connection timeout/i.test(e.message);
}

class Consumer {
  constructor(a) {
    this.a = a;
    this.r = new Redis(a.redisUrl, { lazyConnect: true });
    this.pg = null;
    this.table = ident(a.effectsTable);
    this.nextClaim = 0;
  }

  async connectPg() {
    while (!stopping) {
      const client = new pg.Client(pgConfig(this.a.pgDsn));
      // A lost connection emits 'error' outside any query: note it, the next
      // query fails and handle() reconnects.
      client.on('error', (e) => { client.lost = true; log('WARNING', `PostgreSQL: ${e.message}`); });
      client.on('end', () => { client.lost = true; });
      try {
        await client.connect();
        await client.query(SCHEMA(this.table));
        this.pg = client;
        return;
      } catch (e) {
        client.end().catch(() => {});
        if (!pgConnectionError(e)) throw e;
        log('WARNING', `PostgreSQL: ${e.message}; retrying`);
        await pause(this.a.retryDelay);
      }
    }
  }

  async createGroup() {
    // From 0, like the relay's --group: a group created late misses nothing.
    try {
      await this.r.xgroup('CREATE', this.a.stream, this.a.group, '0', 'MKSTREAM');
    } catch (e) {
      if (!String(e.message).startsWith('BUSYGROUP')) throw e;
    }
  }

  // How often the group has delivered this entry (XPENDING, extended form).
  async deliveries(entryId) {
    const p = await this.r.xpending(this.a.stream, this.a.group, entryId, entryId, 1);
    return p.length ? Number(p[0][3]) : 0;
  }

  async deadLetter(entryId, fields, count, error) {
    // XADD and XACK in one MULTI/EXEC: never acknowledged without being
    // dead-lettered. EXEC discards everything when a command is refused
    // while queued (OOM, NOPERM), but does not roll back a command that
    // fails while running: WATCH + TYPE rule out the one way XADD can
    // (WRONGTYPE). The event's fields go along: the entry itself may be
    // trimmed once acknowledged. One connection, one command at a time: the
    // WATCH applies to this sequence only.
    const entry = { stream: this.a.stream, entry_id: entryId, group: this.a.group, consumer: this.a.consumer,
      deliveries: String(count), error, event: JSON.stringify(fields) };
    for (;;) {
      await this.r.watch(this.a.dlq);
      const type = await this.r.type(this.a.dlq);
      if (type !== 'none' && type !== 'stream') {
        await this.r.unwatch();
        throw new Error(`${this.a.dlq} is not a stream: cannot dead-letter ${entryId}`);
      }
      const res = await this.r.multi()
        .xadd(this.a.dlq, '*', ...Object.entries(entry).flat())
        .xack(this.a.stream, this.a.group, entryId)
        .exec();
      if (res === null) continue; // the DLQ changed between WATCH and EXEC: again
      const failed = res.find(([err]) => err);
      if (failed) throw failed[0];
      break;
    }
    log('ERROR', `dead-lettered ${entryId} (event ${fields[this.a.idField]}) to ${this.a.dlq} after ${count} deliveries: ${error}`);
  }

  // Apply one entry (unless applied before) and acknowledge it; throws when
  // the handler failed.
  async handle(entryId, fields) {
    if (!fields) { // trimmed away while pending: nothing left to apply
      await this.r.xack(this.a.stream, this.a.group, entryId);
      return;
    }
    const eventId = fields[this.a.idField];
    let first;
    for (;;) {
      const client = this.pg;
      try {
        await client.query('BEGIN'); // one transaction: commit or roll back
        try {
          const res = await client.query(INSERT(this.table), [eventId, this.a.stream, entryId,
            fields.event_type, fields.aggregate_id]);
          first = res.rowCount === 1;
          if (first) await applyEffect(client, eventId, fields);
          if (TEST_SLEEP) await sleep(TEST_SLEEP * 1000);
          await client.query('COMMIT');
        } catch (e) {
          await client.query('ROLLBACK').catch(() => {});
          throw e;
        }
        break;
      } catch (e) {
        if (!client.lost && !pgConnectionError(e)) throw e; // the handler failed: process() counts it
        // The connection, not the event, failed: retry in place (the
        // delivery count stays as it is), no poison verdict.
        log('WARNING', `PostgreSQL: ${e.message}; reconnecting`);
        client.end().catch(() => {});
        if (await pause(this.a.retryDelay)) return false; // the entry stays pending for the next start
        await this.connectPg();
        if (stopping) return false;
      }
    }
    if (!first) log('INFO', `event ${eventId} (entry ${entryId}) already applied: acknowledging it again`);
    if (TEST_SLEEP) await sleep(TEST_SLEEP * 1000); // widens the commit-to-XACK window a crash may hit
    // After the commit: a crash right here repeats a no-op on redelivery.
    await this.r.xack(this.a.stream, this.a.group, entryId);
    return true;
  }

  // Handle a batch; false when an entry failed and stays pending.
  async process(entries, redelivered) {
    let ok = true;
    for (const [entryId, fields] of entries) {
      if (stopping) break; // the rest stays pending: read first on the next start
      if (redelivered) {
        // Delivered more than N times with no verdict: the worker died
        // handling it (e.g. killed for memory). Dead-letter it unhandled.
        const n = await this.deliveries(entryId);
        if (n > this.a.maxDeliveries) {
          await this.deadLetter(entryId, fields, n, `no outcome after ${n - 1} deliveries (worker died?)`);
          continue;
        }
      }
      try {
        await this.handle(entryId, fields);
      } catch (e) { // the handler failed: count it against the entry
        const n = await this.deliveries(entryId);
        log('WARNING', `entry ${entryId} (event ${fields[this.a.idField]}), delivery ${n}: ${e.message}`);
        if (n >= this.a.maxDeliveries) {
          await this.deadLetter(entryId, fields, n, `${e.name}: ${e.message}`);
        } else {
          ok = false;
        }
      }
    }
    return ok;
  }

  // XAUTOCLAIM entries idle longer than --claim-idle (their consumer died).
  async claim() {
    let cursor = '0-0';
    let ok = true;
    for (;;) {
      const reply = await this.r.xautoclaim(this.a.stream, this.a.group, this.a.consumer,
        Math.round(this.a.claimIdle * 1000), cursor, 'COUNT', this.a.batch);
      cursor = reply[0];
      const entries = reply[1].map(toEntry);
      if (entries.length) {
        log('INFO', `claimed ${entries.length} idle entries`);
        ok = (await this.process(entries, true)) && ok;
      }
      if (cursor === '0-0' || stopping) return ok;
    }
  }

  async run() {
    await this.r.connect();
    await this.createGroup();
    await this.connectPg();
    let backlog = true; // own pending entries first: those a crash left unacknowledged
    log('INFO', `consuming ${this.a.stream} as ${this.a.group}/${this.a.consumer}`);
    while (!stopping) {
      if (Date.now() >= this.nextClaim) {
        if (!(await this.claim())) backlog = true; // claimed entries that failed are now ours to retry
        this.nextClaim = Date.now() + this.a.claimIdle * 500;
      }
      // Id 0 re-reads this consumer's pending entries (no blocking); ">" new ones.
      const block = backlog ? [] : ['BLOCK', Math.round(this.a.block * 1000)];
      const reply = await this.r.xreadgroup('GROUP', this.a.group, this.a.consumer, 'COUNT', this.a.batch,
        ...block, 'STREAMS', this.a.stream, backlog ? '0' : '>');
      const entries = reply ? reply[0][1].map(toEntry) : [];
      if (backlog && !entries.length) {
        backlog = false;
        continue;
      }
      if (!(await this.process(entries, backlog))) {
        backlog = true; // retry the failed entries after a pause
        await pause(this.a.retryDelay);
      }
    }
    if (this.pg) await this.pg.end().catch(() => {});
    await this.r.quit();
    log('INFO', 'stopped');
  }
}

// [id, [field, value, ...]] -> [id, {field: value}]; [id, null] (deleted) -> [id, null].
function toEntry([id, flat]) {
  if (!flat) return [id, null];
  const fields = {};
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
  return [id, fields];
}

const OPTIONS = {
  // flag: [key, default, parse, help]
  '--redis-url': ['redisUrl', 'redis://127.0.0.1:6379', String, 'also unix:///path/redis.sock'],
  '--pg-dsn': ['pgDsn', undefined, String, 'libpq DSN or postgresql:// URL of the database the effects go to (required)'],
  '--stream': ['stream', 'outbox:order', String, ''],
  '--group': ['group', 'workers', String, ''],
  '--consumer': ['consumer', os.hostname(), String, 'stable across restarts (pod or host name)'],
  '--dlq': ['dlq', undefined, String, 'dead-letter stream (default: <stream>:dlq)'],
  '--max-deliveries': ['maxDeliveries', 5, parseInt, 'deliveries before an entry is dead-lettered'],
  '--claim-idle': ['claimIdle', 60, Number, "seconds before another consumer's pending entry is claimed"],
  '--batch': ['batch', 10, parseInt, 'entries per read'],
  '--block': ['block', 2, Number, 'seconds a read waits for new entries'],
  '--retry-delay': ['retryDelay', 1, Number, 'seconds before failed entries are retried'],
  '--id-field': ['idField', 'id', String, "the field holding the event id (the relay's --id-column)"],
  '--effects-table': ['effectsTable', 'consumer_effects', String, ''],
};

function usage(out, code) {
  out.write('usage: consumer.js --pg-dsn DSN [options]\n');
  for (const [flag, [, def, , help]] of Object.entries(OPTIONS)) {
    out.write(`  ${flag.padEnd(18)} ${help}${def !== undefined ? ` [${def}]` : ''}\n`);
  }
  process.exit(code);
}

function parseArgs(argv) {
  const a = {};
  for (const [, [key, def]] of Object.entries(OPTIONS)) a[key] = def;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-h' || argv[i] === '--help') usage(process.stdout, 0);
    const eq = argv[i].indexOf('=');
    const flag = eq > 0 ? argv[i].slice(0, eq) : argv[i];
    const opt = OPTIONS[flag];
    if (!opt) { process.stderr.write(`consumer.js: unknown option ${argv[i]}\n`); usage(process.stderr, 2); }
    const value = eq > 0 ? argv[i].slice(eq + 1) : argv[++i];
    if (value === undefined) { process.stderr.write(`consumer.js: ${flag} needs a value\n`); usage(process.stderr, 2); }
    a[opt[0]] = opt[2](value);
    if (typeof a[opt[0]] === 'number' && !Number.isFinite(a[opt[0]])) {
      process.stderr.write(`consumer.js: ${flag}: not a number: ${value}\n`);
      process.exit(2);
    }
  }
  if (!a.pgDsn) { process.stderr.write('consumer.js: --pg-dsn is required\n'); usage(process.stderr, 2); }
  a.dlq = a.dlq || `${a.stream}:dlq`;
  return a;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  // Only set a flag: the entry in hand is finished, then the loop ends. A
  // blocked read returns within --block.
  for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => { stopping = true; });
  await new Consumer(args).run();
  process.exit(0);
}

main().catch((e) => {
  // A Redis error (or any other unexpected one) ends the worker: run it under
  // a supervisor (systemd, Kubernetes) that restarts it.
  log('CRITICAL', e.stack || String(e));
  process.exit(1);
});
