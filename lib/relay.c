/*
 * relay.c - the relay loop.
 *
 * One poll loop serves both sockets. WAL messages are decoded and mapped as
 * they arrive and queued to Redis right away, so memory stays bounded for
 * any transaction size; reading stops while the in-flight window is full.
 *
 * Confirmation. Every point at which the relay could tell PostgreSQL "done
 * up to here" becomes a mark (sequence number of the last command queued to
 * Redis at that moment, LSN):
 *   - a commit (C): the commit record's end, its XLogData dataStart;
 *   - a keepalive received outside a transaction: its walEnd (the server has
 *     sent everything before it, so once all earlier commands are acked there
 *     is nothing below walEnd left to deliver);
 *   - a skipped non-transactional message outside a transaction.
 * A mark becomes confirmable when Redis has replied to every command up to
 * its sequence number. The rule itself is lib/confirm.c (pure, unit-tested);
 * advance_confirm() is the only place that feeds it acknowledgements, and
 * send_status() the only place that sends what it answers.
 *
 * The slot record. Before a position is confirmed to PostgreSQL, Redis must
 * have acknowledged the slot record (sink_redis.h) at or past it: the flush
 * sent is min(acked, rec_acked), never below what was sent before. So the
 * slot this relay streams never stands past the record, and a start that
 * finds the slot missing, invalidated or past the record refuses (exit 8)
 * instead of streaming on over a gap (see gap_refuse()).
 */
#include "relay.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "buf.h"
#include "confirm.h"
#include "event.h"
#include "exitcode.h"
#include "log.h"
#include "metrics.h"
#include "pgrepl.h"
#include "preflight.h"
#include "sink_redis.h"
#include "wal2json.h"

#define MSGS_PER_ROUND 1024
#define STATUS_MIN_GAP_US 100000      /* rate limit for "confirmed moved" updates */
#define STANDBY_RETRY_MS 2000
#define RETRY_BASE_MS 200
#define STATS_INTERVAL_US 30000000
#define MEMORY_POLL_US 5000000 /* INFO memory for /metrics and /readyz */
#define MAX_REDIS_FDS 64 /* one per Redis Cluster master */

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	static const char msg[] = "outbox-relay: second signal, exiting now without draining\n";

	(void)sig;
	if (stop_requested) {
		(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(EXIT_FAILURE_RUNTIME);
	}
	stop_requested = 1;
}

struct relay {
	const struct relay_config *cf;
	struct pgrepl *pg;
	struct sink_redis *sink;
	struct metrics *m;
	struct metrics_server *http;
	struct w2j_decoder *dec;
	struct mapper *map;


	/* Current transaction (between B and C). */
	bool in_txn;
	struct txn_info tx;
	char committed_at[64];
	uint32_t next_index;
	struct buf content; /* copy of a logical message's content */

	struct confirm cfm; /* marks, acknowledged and confirmed positions (confirm.h) */

	lsn_t received;   /* highest LSN seen on the stream */
	lsn_t server_wal_end; /* newest keepalive walEnd: how far the server has read WAL */

	/* Slot record (see the top of this file). */
	bool guard_set;      /* the record was read and handed to pgrepl */
	int64_t rec_last_us; /* when the last one was queued */
	bool gap_wait;       /* a start found a gap: re-reading the record */
	uint64_t gap_gen;    /* sink_redis_record_gen() when that read was queued */
	uint64_t acked_seq_seen;
	uint64_t redis_fail_seq; /* Redis counts as recovered once this seq is acknowledged */
	bool redis_fatal;        /* Redis state no retry can fix (sink_error_is_fatal) */
	bool redis_noperm;       /* ... and it was an ACL refusal: a setup error (exit 5) */
	uint64_t refused;        /* values this large or larger are dead-lettered (0: none) */
	uint64_t refused_now;    /* Redis refused a value this large: run again (relay_run) */
	uint64_t rejected_seen;  /* sink's rejected count already logged */
	int64_t rejected_log_us; /* when it was last logged (one line per stats interval) */
	int64_t last_status_us;
	int64_t last_pg_msg_us; /* when the server last sent anything */
	bool pg_ever_started;

	struct backoff pg_bo, redis_bo;
	bool pg_down, redis_down, standby;

	int64_t last_stats_us;

	/* How the run goes and ends (relay_turn). */
	bool stopping;          /* a stop signal came: draining */
	int64_t stop_deadline;  /* ... until then (--shutdown-timeout) */
	int rc;                 /* the exit code, EXIT_OK unless a step says otherwise */
	const char *final_reason;
	bool oom;
	int64_t memory_poll_us;  /* when INFO memory was last asked for */
	int64_t trim_us;         /* when the last --trim acked round was started */
	char policy_warned[32];  /* the volatile-* policy last warned about */
	uint64_t last_stats_published;
	char last_notice[512]; /* the server notice logged last, and when */
	int64_t last_notice_us;
};

/* ---- helpers ---- */

static void count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static void gauge(_Atomic uint64_t *g, uint64_t v)
{
	atomic_store_explicit(g, v, memory_order_relaxed);
}

int64_t backoff_next(struct backoff *b, int cap_ms)
{
	int64_t delay = RETRY_BASE_MS;

	for (int i = 0; i < b->attempt && delay < cap_ms; i++)
		delay *= 2;
	if (delay > cap_ms)
		delay = cap_ms;
	b->attempt++;
	/* Full jitter over the upper half: spread out relays restarting together. */
	delay = delay / 2 + (int64_t)(random() % (delay / 2 + 1));
	b->next_us = time_mono_us() + delay * 1000;
	return delay;
}

/*
 * The record Redis acknowledged is this relay's own: from now on every start
 * (a reconnect after a failover included) checks the slot against it.
 */
static void refresh_guard(struct relay *r)
{
	char owner[200];
	struct slot_guard g = {.active = true, .confirmed = r->cfm.rec_acked, .owner = owner,
			       .accept = r->cf->accept_gap};

	snprintf(owner, sizeof(owner), "%s/%s", pgrepl_system_id(r->pg), pgrepl_dbname(r->pg));
	pgrepl_set_guard(r->pg, &g);
}

/* Take what Redis acknowledged: marks it covers, a slot record write (confirm.h). */
static void advance_confirm(struct relay *r)
{
	uint64_t acked_seq = sink_redis_acked_seq(r->sink);

	if (acked_seq > r->acked_seq_seen) { /* Redis acknowledges: progress */
		r->acked_seq_seen = acked_seq;
		r->redis_bo.attempt = 0;
		/* Recovered when what failed went through, not when some other
		 * stream's command did: one warning per episode. */
		if (r->redis_down && acked_seq >= r->redis_fail_seq) {
			log_info("Redis: recovered, events are acknowledged again");
			r->redis_down = false;
		}
	}
	if (confirm_acked(&r->cfm, acked_seq))
		refresh_guard(r);
}

/*
 * Queue a slot record write for the acknowledged position when it is ahead
 * of the record, none is in flight, and the last one is at least
 * STATUS_MIN_GAP_US old (or now). Returns false only when out of memory.
 */
static bool queue_record(struct relay *r, bool now)
{
	int64_t t = time_mono_us();

	if (!r->guard_set || !confirm_record_due(&r->cfm) ||
	    (!now && t - r->rec_last_us < STATUS_MIN_GAP_US))
		return true;
	if (!sink_redis_queue_record(r->sink, r->cfm.acked, r->cfm.commit_lsn, r->cfm.commit_us))
		return false;
	confirm_record_queued(&r->cfm, sink_redis_last_seq(r->sink));
	r->rec_last_us = t;
	return true;
}

static bool send_status(struct relay *r, bool reply_requested)
{
	lsn_t flush = confirm_flush(&r->cfm); /* never backwards */

	if (!pgrepl_send_status(r->pg, r->received, flush, reply_requested))
		return false;
	if (flush > r->cfm.confirmed) {
		atomic_store_explicit(&r->m->last_confirm_unix_us, time_now_us(), memory_order_relaxed);
		gauge(&r->m->confirmed_lsn, flush);
	}
	confirm_sent(&r->cfm, flush);
	r->last_status_us = time_mono_us();
	return true;
}

/* ---- WAL message handling ---- */

/*
 * held: ev's values may point into the WAL message's own buffer (decoded in
 * place), which the sink may then keep instead of copying large values.
 */
static bool queue_event(struct relay *r, const struct event *ev, bool dead, bool held)
{
	struct sink_hold hold = {held ? pgrepl_buffer(r->pg) : NULL, pgrepl_free_buffer};
	bool ok = sink_redis_publish_held(r->sink, ev, dead, &hold);

	if (held && !hold.p) /* the sink keeps it now */
		(void)pgrepl_take_buffer(r->pg);
	if (!ok)
		log_error("out of memory queueing an event for Redis");
	return ok;
}

/* One warning per dead letter, with the transaction's position as fields. */
static void warn_dead_letter(const struct relay *r, const char *reason)
{
	char lsnbuf[LSN_STRLEN], xid[16];
	struct log_kv kv[] = {
		{"lsn", lsn_format(r->tx.commit_lsn, lsnbuf)},
		{"xid", r->tx.has_xid ? xid : NULL},
		{"stream", r->cf->dead_letter_stream},
	};

	if (log_current_level < LOG_LEVEL_WARN)
		return;
	snprintf(xid, sizeof(xid), "%u", r->tx.xid);
	log_write_kv(LOG_LEVEL_WARN, kv, sizeof(kv) / sizeof(kv[0]),
		     "dead-lettering an event of the transaction committing at %s: %s", lsnbuf,
		     reason);
}

static bool dead_letter(struct relay *r, enum dead_reason kind, const char *reason, const char *raw,
			size_t len)
{
	struct event ev;

	mapper_dead_letter(r->map, &r->tx, r->next_index++, kind, reason, raw, len, &ev);
	if (mapper_failed(r->map)) {
		log_error("out of memory building a dead-letter entry");
		return false;
	}
	warn_dead_letter(r, reason);
	return queue_event(r, &ev, true, false);
}

enum map_result relay_map_event(struct mapper *m, const struct relay_config *cf,
				const struct txn_info *tx, uint32_t index,
				const struct w2j_field *fields, size_t n, const char *raw, size_t len,
				uint64_t max_value, struct event *ev, const char **reason, char *why,
				size_t whylen)
{
	enum map_result mr = mapper_map(m, tx, index, fields, n, raw, len, ev, reason);

	if (mr == MAP_EVENT && !mapper_failed(m) && max_value) {
		/* A value Redis would refuse: dead-lettered, not sent to fail forever. */
		for (size_t i = 0; i < ev->nfields; i++) {
			if (ev->fields[i].value_len <= max_value)
				continue;
			snprintf(why, whylen,
				 "field \"%.*s\" is %zu bytes, over %llu, the largest value Redis "
				 "takes (its proto-max-bulk-len, or learned from a refusal)",
				 (int)(ev->fields[i].name_len > 64 ? 64 : ev->fields[i].name_len),
				 ev->fields[i].name, ev->fields[i].value_len,
				 (unsigned long long)max_value);
			mapper_dead_letter(m, tx, index, DEAD_TOO_LARGE, why, raw, len, ev);
			*reason = why;
			return MAP_DEAD_LETTER;
		}
	}
	if (mr == MAP_EVENT && !mapper_failed(m) &&
	    (int64_t)sink_redis_event_size(ev) > cf->max_event_bytes) {
		snprintf(why, whylen, "event is %zu bytes, over --max-event-bytes %lld",
			 sink_redis_event_size(ev), (long long)cf->max_event_bytes);
		/* mapper_dead_letter keeps at most DEAD_RAW_MAX bytes of raw. */
		mapper_dead_letter(m, tx, index, DEAD_TOO_LARGE, why, raw, len, ev);
		*reason = why;
		mr = MAP_DEAD_LETTER;
	}
	return mr;
}

static bool map_and_queue(struct relay *r, const struct w2j_field *fields, size_t n,
			  const char *raw, size_t len, bool held)
{
	const char *reason = NULL;
	char why[200];
	struct event ev;
	enum map_result mr;
	uint64_t mv = sink_redis_max_value(r->sink);

	if (r->refused && (!mv || r->refused - 1 < mv))
		mv = r->refused - 1;
	mr = relay_map_event(r->map, r->cf, &r->tx, r->next_index++, fields, n, raw, len, mv, &ev,
			     &reason, why, sizeof(why));
	if (mapper_failed(r->map)) {
		log_error("out of memory mapping an event");
		return false;
	}
	if (mr == MAP_DEAD_LETTER)
		warn_dead_letter(r, reason);
	return queue_event(r, &ev, mr == MAP_DEAD_LETTER, held && mr == MAP_EVENT);
}

static bool is_outbox_table(const struct relay *r, const struct w2j_change *ch)
{
	/* The names PostgreSQL resolved --table to: what wal2json prints. */
	return ch->schema && ch->table && strcmp(ch->table, pgrepl_table_name(r->pg)) == 0 &&
	       strcmp(ch->schema, pgrepl_table_schema(r->pg)) == 0;
}

static void begin_txn(struct relay *r, const struct w2j_change *ch, lsn_t data_start)
{
	char lsnbuf[LSN_STRLEN];

	if (r->in_txn)
		log_warn("BEGIN at %s while a transaction was open; the earlier one will be "
			 "delivered again on reconnect",
			 lsn_format(data_start, lsnbuf));
	r->in_txn = true;
	r->next_index = 0;
	r->tx.commit_lsn = ch->nextlsn;
	r->tx.has_xid = ch->has_xid;
	r->tx.xid = ch->xid;
	r->tx.committed_at = NULL;
	r->tx.committed_at_len = 0;
	r->tx.committed_unix_us = 0;
	if (ch->timestamp && ch->timestamp_len < sizeof(r->committed_at)) {
		memcpy(r->committed_at, ch->timestamp, ch->timestamp_len);
		r->committed_at[ch->timestamp_len] = '\0';
		r->tx.committed_at = r->committed_at;
		r->tx.committed_at_len = ch->timestamp_len;
		if (!time_parse_pg(ch->timestamp, ch->timestamp_len, &r->tx.committed_unix_us))
			r->tx.committed_unix_us = 0;
	}
}

/* Returns false only on a fatal (out-of-memory) failure. */
static bool handle_xlogdata(struct relay *r, const struct pg_msg *m)
{
	struct w2j_change ch;
	char lsnbuf[LSN_STRLEN];

	const char *raw;
	size_t rawlen;
	bool inplace = m->len >= W2J_INPLACE_MIN;

	if (m->data_start > r->received)
		r->received = m->data_start;
	if ((int64_t)m->len > r->cf->max_event_bytes && r->in_txn && m->len > 14 &&
	    memcmp(m->data, "{\"action\":\"I\"", 14) == 0) {
		/* An outbox row (add-tables lets no other through) too big to publish:
		 * dead-lettered without decoding it, so it costs no more memory than
		 * libpq's own copies. */
		char reason[200];

		snprintf(reason, sizeof(reason), "row is %zu bytes of wal2json, over --max-event-bytes %lld",
			 m->len, (long long)r->cf->max_event_bytes);
		return dead_letter(r, DEAD_TOO_LARGE, reason, m->data, m->len);
	}
	/* A large row is decoded in its own buffer, which may then go to Redis as it is. */
	if (!(inplace ? w2j_decode_inplace(r->dec, m->data, m->len, DEAD_RAW_MAX + 4, &ch)
		      : w2j_decode(r->dec, m->data, m->len, &ch))) {
		char reason[600];

		snprintf(reason, sizeof(reason), "undecodable wal2json output: %s", w2j_errmsg(r->dec));
		if (!r->in_txn) {
			/* Outside B..C there is no transaction to attach it to; keep it
			 * anyway, positioned at its own LSN. */
			r->tx = (struct txn_info){.commit_lsn = m->data_start};
			r->next_index = 0;
		}
		return dead_letter(r, DEAD_UNDECODABLE, reason, m->data, m->len);
	}
	switch (ch.action) {
	case W2J_BEGIN:
		if (ch.nextlsn == LSN_INVALID) {
			log_error("wal2json BEGIN at %s has no \"nextlsn\"; is include-lsn ignored?",
				  lsn_format(m->data_start, lsnbuf));
			return false;
		}
		begin_txn(r, &ch, m->data_start);
		return true;
	case W2J_COMMIT:
		r->in_txn = false;
		count(&r->m->transactions);
		/* dataStart of C is the commit record's end: the LSN to confirm. */
		return confirm_mark(&r->cfm, sink_redis_last_seq(r->sink), m->data_start,
				 r->next_index > 0 ? m->data_start : LSN_INVALID,
				 r->tx.committed_unix_us);
	case W2J_INSERT:
		if (!is_outbox_table(r, &ch))
			return true;
		if (!r->in_txn) {
			log_error("INSERT at %s outside a transaction; wal2json must run with "
				  "include-transaction",
				  lsn_format(m->data_start, lsnbuf));
			return false;
		}
		/* Dead letters keep the row as it came, before decoding changed it. */
		raw = inplace ? w2j_original(r->dec, &rawlen) : NULL;
		return map_and_queue(r, ch.columns, ch.ncolumns, raw ? raw : m->data, m->len,
				     inplace);
	case W2J_UPDATE:
		count(&r->m->ignored[IGN_UPDATE]);
		return true;
	case W2J_DELETE:
		count(&r->m->ignored[IGN_DELETE]);
		return true;
	case W2J_TRUNCATE:
		count(&r->m->ignored[IGN_TRUNCATE]);
		return true;
	case W2J_MESSAGE:
		if (!ch.transactional || !r->in_txn) {
			count(&r->m->ignored[IGN_MESSAGE]);
			log_warn("skipping a non-transactional logical message with prefix \"%s\" at "
				 "%s: only pg_logical_emit_message(true, ...) is delivered",
				 ch.prefix ? ch.prefix : "", lsn_format(m->data_start, lsnbuf));
			if (!r->in_txn)
				return confirm_mark(&r->cfm, sink_redis_last_seq(r->sink), m->data_start, 0, 0);
			return true;
		} else {
			struct w2j_field *fields;
			size_t n;

			/* content lives in the decoder, which the next decode reuses. */
			buf_reset(&r->content);
			buf_append(&r->content, ch.content, ch.content_len);
			if (r->content.failed)
				return false;
			if (!w2j_decode_object(r->dec, r->content.data, r->content.len, &fields, &n)) {
				char reason[600];

				const char *e = w2j_errmsg(r->dec);

				if (strstr(e, "not a JSON object"))
					snprintf(reason, sizeof(reason), "%s", e);
				else
					snprintf(reason, sizeof(reason), "message content is not a JSON object: %s", e);
				raw = inplace ? w2j_original(r->dec, &rawlen) : NULL;
				return dead_letter(r, DEAD_NOT_JSON, reason, raw ? raw : m->data,
						   m->len);
			}
			raw = inplace ? w2j_original(r->dec, &rawlen) : NULL;
			return map_and_queue(r, fields, n, raw ? raw : m->data, m->len, false);
		}
	}
	return true;
}

/* ---- connection management ---- */

static void pg_lost(struct relay *r, const char *why)
{
	int64_t delay = backoff_next(&r->pg_bo, r->cf->retry_max_ms);

	if (!r->pg_down)
		log_warn("PostgreSQL: %s; reconnecting with backoff (next try in %lld ms)", why,
			 (long long)delay);
	else
		log_debug("PostgreSQL: %s; next try in %lld ms", why, (long long)delay);
	r->pg_down = true;
	r->in_txn = false; /* a partial transaction is sent again in full */
	pgrepl_close(r->pg);
}

/* Metrics label for the sink's last failure. */
static enum redis_err_kind err_kind(enum sink_error_kind k)
{
	switch (k) {
	case SINK_ERR_OOM:
		return RERR_OOM;
	case SINK_ERR_WRONGTYPE:
		return RERR_WRONGTYPE;
	case SINK_ERR_NOSCRIPT:
		return RERR_NOSCRIPT;
	case SINK_ERR_READONLY:
		return RERR_READONLY;
	case SINK_ERR_BUSY:
		return RERR_BUSY;
	case SINK_ERR_TIMEOUT:
		return RERR_TIMEOUT;
	case SINK_ERR_CLUSTER:
		return RERR_CLUSTER;
	case SINK_ERR_WAIT:
		return RERR_WAIT;
	case SINK_ERR_ORDER:
		return RERR_ORDER;
	case SINK_ERR_FOREIGN:
	case SINK_ERR_LOST:
		return RERR_STATE;
	case SINK_ERR_NOPERM:
	case SINK_ERR_TOO_BIG:
		return RERR_OTHER;
	case SINK_ERR_IO:
	case SINK_ERR_NONE:
		return RERR_IO;
	case SINK_ERR_OTHER:
		break;
	}
	return RERR_OTHER;
}

static void redis_lost(struct relay *r, const char *why)
{
	int64_t delay = backoff_next(&r->redis_bo, r->cf->retry_max_ms);

	count(&r->m->redis_errors[err_kind(sink_redis_errkind(r->sink))]);
	if (sink_error_is_fatal(sink_redis_errkind(r->sink))) {
		if (sink_redis_errkind(r->sink) == SINK_ERR_TOO_BIG)
			log_warn("Redis: %s", why); /* relay_run goes on */
		else
			log_error("Redis: %s", why);
		r->redis_fatal = true;
		r->redis_noperm = sink_redis_errkind(r->sink) == SINK_ERR_NOPERM;
		if (sink_redis_errkind(r->sink) == SINK_ERR_TOO_BIG)
			r->refused_now = sink_redis_refused_value(r->sink);
		sink_redis_disconnect(r->sink);
		return;
	}
	if (!r->redis_down) /* everything queued so far must go through */
		r->redis_fail_seq = sink_redis_last_seq(r->sink);
	if (!r->redis_down && sink_redis_errkind(r->sink) == SINK_ERR_CLUSTER)
		/* A slot moved (resharding, failover): routine, not a warning. */
		log_info("Redis Cluster: %s; refreshing the slot map and sending %llu "
			 "unacknowledged event(s) again (next try in %lld ms)",
			 why, (unsigned long long)sink_redis_inflight_events(r->sink), (long long)delay);
	else if (!r->redis_down)
		log_warn("Redis: %s; %llu unacknowledged event(s) will be sent again; no LSN is "
			 "confirmed past them (next try in %lld ms)",
			 why, (unsigned long long)sink_redis_inflight_events(r->sink), (long long)delay);
	else
		log_debug("Redis: %s; next try in %lld ms", why, (long long)delay);
	r->redis_down = true;
	sink_redis_disconnect(r->sink);
}

/* The commit time of the slot record, or words saying it is unknown. */
static const char *format_us(int64_t us, char *buf, size_t len)
{
	const char *t = time_format_iso(us, buf, len);

	return t ? t : "an unknown time";
}

/*
 * One line for a slot that is not the one this relay streamed (pgrepl's
 * message says which way): what Redis has, what may be missing, and the two
 * ways forward. Returns the exit code.
 */
static int gap_refuse(struct relay *r)
{
	char conf[LSN_STRLEN], commit[LSN_STRLEN], when[64];

	log_error("%s; the slot record in Redis (%s:slot:%s) says this relay confirmed up to %s "
		  "and published events up to the commit at %s (committed %s): events committed "
		  "after that may be missing from the streams. Republish the outbox rows committed "
		  "since then (outbox-relay republish --since %s; README, \"Gaps\"), then start once "
		  "with --accept-gap %s to stream from the slot's position",
		  pgrepl_errmsg(r->pg), r->cf->key_prefix, r->cf->slot,
		  lsn_format(r->cfm.rec_acked, conf),
		  r->cfm.commit_lsn ? lsn_format(r->cfm.commit_lsn, commit) : "(none recorded)",
		  format_us(r->cfm.commit_us, when, sizeof(when)),
		  r->cfm.commit_us > 0 ? when : "<the time of the last event in Redis>", conf);
	return EXIT_SLOT_GAP;
}

static int foreign_refuse(struct relay *r)
{
	log_error("%s: give this relay its own --key-prefix or --slot (if this database replaced "
		  "that one on purpose, delete the key %s:slot:%s and that database's \"%s:wm:*\" "
		  "keys)",
		  pgrepl_errmsg(r->pg), r->cf->key_prefix, r->cf->slot, r->cf->key_prefix);
	return EXIT_REDIS_STATE;
}

/* Hand the slot record Redis has (the last read) to pgrepl, and take its position. */
static void set_guard(struct relay *r)
{
	const struct slot_record *rec = sink_redis_record(r->sink);
	struct slot_guard g = {.active = rec != NULL, .accept = r->cf->accept_gap};

	if (rec) {
		g.confirmed = rec->confirmed;
		g.owner = rec->owner;
		confirm_record_read(&r->cfm, rec->confirmed, rec->commit_lsn, rec->commit_us);
	}
	pgrepl_set_guard(r->pg, &g);
	r->guard_set = true;
}

/*
 * The user accepted a gap (--accept-gap): what is before the slot's position
 * counts as done, and the record moves there before anything is confirmed.
 */
static bool accept_gap(struct relay *r)
{
	lsn_t at = pgrepl_slot_confirmed(r->pg);
	char lsnbuf[LSN_STRLEN];

	log_warn("%s: accepted; streaming from %s, events committed between the record and that "
		 "position are not published by this relay",
		 pgrepl_gap_accepted(r->pg), lsn_format(at, lsnbuf));
	confirm_accept(&r->cfm, at);
	return queue_record(r, true);
}

/* Returns an exit code for a permanent failure, or -1 to go on. */
static int try_pg(struct relay *r)
{
	enum pg_status st = pgrepl_start(r->pg);
	char lsnbuf[LSN_STRLEN];

	switch (st) {
	case PG_OK:
		if (!sink_redis_set_owner(r->sink, pgrepl_system_id(r->pg), pgrepl_dbname(r->pg))) {
			log_error("database name \"%s\" is too long", pgrepl_dbname(r->pg));
			return EXIT_PG_SETUP;
		}
		if (pgrepl_gap_accepted(r->pg)[0] && !accept_gap(r)) {
			log_error("out of memory");
			return EXIT_FAILURE_RUNTIME;
		}
		if (!r->pg_ever_started) {
			struct buf real = {0};

			buf_puts(&real, pgrepl_table_schema(r->pg));
			buf_putc(&real, '.');
			buf_puts(&real, pgrepl_table_name(r->pg));
			if (!real.failed && strcmp(real.data, r->cf->table) != 0)
				log_info("--table %s is the table %s: publishing its inserts",
					 r->cf->table, real.data);
			buf_finish(&real);
		}
		if (pgrepl_altered_failover(r->pg))
			log_info("slot \"%s\": FAILOVER switched on (--failover-slot), so standbys with "
				 "sync_replication_slots keep it", r->cf->slot);
		if (!r->pg_ever_started && r->cf->failover_slot && pgrepl_server_version(r->pg) < 170000)
			log_info("PostgreSQL %d has no failover slots (17+): a failover to a standby "
				 "loses slot \"%s\", and the relay then stops with exit 8 (README, "
				 "\"PostgreSQL high availability\")",
				 pgrepl_server_version(r->pg) / 10000, r->cf->slot);
		if (r->standby)
			log_info("slot \"%s\" is free now: active, streaming", r->cf->slot);
		else if (r->pg_down && r->pg_ever_started)
			log_info("PostgreSQL: reconnected, streaming slot \"%s\"", r->cf->slot);
		else
			log_info("streaming slot \"%s\"%s%s", r->cf->slot,
				 pgrepl_created_slot(r->pg) ? " (created it)" : " from its confirmed position ",
				 pgrepl_created_slot(r->pg)
					 ? ""
					 : lsn_format(pgrepl_slot_confirmed(r->pg), lsnbuf));
		if (r->pg_ever_started)
			count(&r->m->pg_reconnects);
		r->pg_ever_started = true;
		r->pg_down = r->standby = false;
		r->in_txn = false; /* pg_bo resets once a message arrives */
		r->last_pg_msg_us = time_mono_us();
		r->last_status_us = 0; /* report our position right away */
		return -1;
	case PG_STANDBY:
		if (!r->standby)
			log_info("standby: slot \"%s\" is active in another process (%s); retrying "
				 "every %d ms and taking over when it is released",
				 r->cf->slot, pgrepl_errmsg(r->pg), STANDBY_RETRY_MS);
		r->standby = true;
		r->pg_bo.next_us = time_mono_us() + (STANDBY_RETRY_MS / 2 + random() % STANDBY_RETRY_MS) * 1000;
		return -1;
	case PG_RETRY:
		pg_lost(r, pgrepl_errmsg(r->pg));
		return -1;
	case PG_FATAL_SETUP:
		log_error("%s", pgrepl_errmsg(r->pg));
		return EXIT_PG_SETUP;
	case PG_FATAL_SLOT:
		log_error("%s", pgrepl_errmsg(r->pg));
		return EXIT_SLOT;
	case PG_FATAL_SCHEMA:
		log_error("%s", pgrepl_errmsg(r->pg));
		return EXIT_OUTBOX_SCHEMA;
	case PG_FATAL_USAGE:
		log_error("%s", pgrepl_errmsg(r->pg));
		return EXIT_USAGE;
	case PG_FATAL_GAP:
		/* Judge it against a record read after the slot was: another relay
		 * on this slot (this one was its standby) may have moved both. */
		if (!sink_redis_queue_record_read(r->sink)) {
			log_error("out of memory");
			return EXIT_FAILURE_RUNTIME;
		}
		log_debug("%s; reading the slot record again before deciding", pgrepl_errmsg(r->pg));
		r->gap_wait = true;
		r->gap_gen = sink_redis_record_gen(r->sink);
		return -1;
	case PG_FATAL_FOREIGN:
		return foreign_refuse(r);
	}
	return -1;
}

/*
 * The slot record arrived (the first connect's read, or a re-read after a
 * suspected gap): hand it to pgrepl and judge the slot the last start found
 * against it. Returns an exit code, or -1 to go on.
 */
static int record_arrived(struct relay *r)
{
	bool recheck = r->gap_wait || pgrepl_streaming(r->pg);
	enum pg_status st;

	set_guard(r);
	r->gap_wait = false;
	if (!recheck)
		return -1; /* the next start checks against it */
	st = pgrepl_recheck(r->pg);
	if (st == PG_FATAL_FOREIGN)
		return foreign_refuse(r);
	if (st == PG_FATAL_GAP)
		return gap_refuse(r);
	if (!pgrepl_streaming(r->pg)) { /* the fresh record clears it: start again */
		r->pg_bo.next_us = time_mono_us();
		return -1;
	}
	/* PostgreSQL was started while Redis was unreachable, and the slot passes */
	if (pgrepl_gap_accepted(r->pg)[0] && !accept_gap(r)) {
		log_error("out of memory");
		return EXIT_FAILURE_RUNTIME;
	}
	return -1;
}

static int try_redis(struct relay *r)
{
	char where[300], master[300], at[320] = "";
	enum sink_status st = sink_redis_connect(r->sink);

	redis_target_describe(&r->cf->redis, where, sizeof(where));
	switch (st) {
	case SINK_OK: {
		const char *policy = sink_redis_maxmemory_policy(r->sink);

		if (strncmp(policy, "volatile-", 9) == 0 && strcmp(policy, r->policy_warned) != 0) {
			log_warn("Redis at %s has maxmemory-policy %s: the relay's dedup keys have a TTL "
				 "and are evicted first under memory pressure, so a duplicate could slip "
				 "through; set maxmemory-policy noeviction",
				 where, policy);
			snprintf(r->policy_warned, sizeof(r->policy_warned), "%s", policy);
		}
		r->memory_poll_us = 0; /* read used_memory soon */
		/* Sentinel mode: the master the Sentinels named. */
		if (sink_redis_sentinel_master(r->sink, master, sizeof(master)))
			snprintf(at, sizeof(at), ", at %s", master);
	}
		if (!r->redis_down)
			log_info("connected to Redis at %s%s", where, at);
		else if (sink_redis_inflight_events(r->sink) == 0)
			log_info("Redis: reconnected to %s%s", where, at);
		else
			log_debug("Redis: reconnected to %s%s; resending %llu event(s)", where, at,
				  (unsigned long long)sink_redis_inflight_events(r->sink));
		/* Recovery (and the backoff reset) waits for the first acknowledged
		 * command: a server that accepts connections but fails every command
		 * must not be hammered, nor logged about on every attempt. */
		if (sink_redis_inflight_events(r->sink) == 0)
			r->redis_down = false;
		return -1;
	case SINK_RETRY: {
		char why[700];

		/* A refused or failed connect is an I/O failure for the metrics. */
		snprintf(why, sizeof(why), "%s: %s", where, sink_redis_errmsg(r->sink));
		redis_lost(r, why);
		return -1;
	}
	case SINK_FATAL:
		log_error("Redis at %s: %s", where, sink_redis_errmsg(r->sink));
		return EXIT_REDIS_SETUP;
	}
	return -1;
}

/* Refresh what /metrics and the probes read; cheap relaxed stores. */
static void publish_gauges(struct relay *r, int64_t now, bool stopping)
{
	struct metrics *m = r->m;
	enum relay_state st;
	const struct sink_stats *ss = sink_redis_stats(r->sink);

	if (stopping)
		st = STATE_STOPPING;
	else if (r->standby)
		st = STATE_STANDBY;
	else if (pgrepl_streaming(r->pg) && sink_redis_connected(r->sink))
		st = STATE_STREAMING;
	else if (r->pg_down || r->redis_down)
		st = STATE_RETRYING;
	else
		st = STATE_STARTING;
	atomic_store_explicit(&m->state, (int)st, memory_order_relaxed);
	atomic_store_explicit(&m->redis_connected, sink_redis_connected(r->sink),
			      memory_order_relaxed);
	atomic_store_explicit(&m->loop_heartbeat_mono_us, now, memory_order_relaxed);
	gauge(&m->inflight_events, sink_redis_inflight_events(r->sink));
	gauge(&m->inflight_bytes, sink_redis_inflight_bytes(r->sink));
	gauge(&m->received_lsn, r->received);
	gauge(&m->server_wal_end, r->server_wal_end);
	gauge(&m->redis_reconnects, ss->reconnects);
	{
		uint64_t used = 0, max = 0;

		if (sink_redis_memory(r->sink, &used, &max)) {
			gauge(&m->redis_used_memory, used);
			gauge(&m->redis_maxmemory, max);
			atomic_store_explicit(&m->redis_memory_known, true, memory_order_relaxed);
		}
	}
}

/* --trim acked: count a finished round and log one line for it. */
static void trim_finished(struct relay *r)
{
	struct sink_trim_result t;

	if (!sink_redis_trim_result(r->sink, &t))
		return;
	atomic_fetch_add_explicit(&r->m->trimmed_entries, t.removed, memory_order_relaxed);
	count(&r->m->trim_episodes);
	if (t.failed)
		log_warn("trim: %u of %u stream(s) trimmed, %llu entries removed; %u stream(s) "
			 "not trimmed (last error: %s), tried again in the next round",
			 t.trimmed, t.streams, (unsigned long long)t.removed, t.failed, t.err);
	else if (t.removed)
		log_info("trim: %u of %u stream(s) trimmed, %llu entries removed", t.trimmed,
			 t.streams, (unsigned long long)t.removed);
	else
		log_debug("trim: %u stream(s) checked, nothing consumed by every group to remove",
			  t.streams);
}

static void log_stats(struct relay *r, int64_t now)
{
	const struct sink_stats *s = sink_redis_stats(r->sink);
	double secs = (double)(now - r->last_stats_us) / 1e6;
	char c[LSN_STRLEN], rcv[LSN_STRLEN];

	log_info("stats: published=%llu (%.0f/s) replays=%llu duplicates=%llu dead_lettered=%llu "
		 "ignored=%llu inflight=%llu confirmed=%s received=%s lag_bytes=%llu",
		 (unsigned long long)s->published,
		 secs > 0 ? (double)(s->published - r->last_stats_published) / secs : 0.0,
		 (unsigned long long)s->replays, (unsigned long long)s->duplicates,
		 (unsigned long long)s->dead_lettered,
		 (unsigned long long)(atomic_load(&r->m->ignored[IGN_UPDATE]) +
				      atomic_load(&r->m->ignored[IGN_DELETE]) +
				      atomic_load(&r->m->ignored[IGN_TRUNCATE]) +
				      atomic_load(&r->m->ignored[IGN_MESSAGE])),
		 (unsigned long long)sink_redis_inflight_events(r->sink), lsn_format(r->cfm.confirmed, c),
		 lsn_format(r->received, rcv),
		 (unsigned long long)(r->received > r->cfm.confirmed ? r->received - r->cfm.confirmed : 0));
	r->last_stats_us = now;
	r->last_stats_published = s->published;
}

/*
 * Peak RSS in kB: VmHWM from /proc/self/status. getrusage()'s ru_maxrss is
 * not used: Linux carries the parent's high-water mark across execve().
 */
long relay_peak_rss_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f) {
		struct rusage ru;

		getrusage(RUSAGE_SELF, &ru);
		return ru.ru_maxrss;
	}
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static void log_final(struct relay *r, const char *why)
{
	const struct sink_stats *s = sink_redis_stats(r->sink);
	char c[LSN_STRLEN];

	log_info("stopped (%s): confirmed=%s published=%llu replays=%llu duplicates=%llu "
		 "dead_lettered=%llu transactions=%llu ask_redirects=%llu peak_rss_kb=%ld",
		 why, lsn_format(r->cfm.confirmed, c), (unsigned long long)s->published,
		 (unsigned long long)s->replays, (unsigned long long)s->duplicates,
		 (unsigned long long)s->dead_lettered,
		 (unsigned long long)atomic_load(&r->m->transactions),
		 (unsigned long long)s->ask_redirects, relay_peak_rss_kb());
}

static void install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: poll() returns EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

static void relay_free(struct relay *r)
{
	metrics_server_stop(r->http);
	metrics_destroy(r->m);
	pgrepl_destroy(r->pg);
	sink_redis_destroy(r->sink);
	w2j_destroy(r->dec);
	mapper_destroy(r->map);
	confirm_finish(&r->cfm);
	buf_finish(&r->content);
}

/* ---- the loop ---- */

/* ---- the loop, one step at a time ---- */

/* Leave the loop with this exit code and reason for the final log line. */
static bool finish(struct relay *r, int rc, const char *why)
{
	r->rc = rc;
	r->final_reason = why;
	return false;
}

static bool out_of_memory(struct relay *r)
{
	r->oom = true;
	return false;
}

/* A Redis state no retry fixes ends the run; a stop signal starts the drain. */
static bool step_stop(struct relay *r, int64_t now)
{
	if (r->redis_fatal) {
		if (r->refused_now) /* relay_run runs again */
			return finish(r, EXIT_OK, "Redis refused a value this large");
		return r->redis_noperm
			       ? finish(r, EXIT_REDIS_SETUP, "the Redis ACL user lacks a permission")
			       : finish(r, EXIT_REDIS_STATE, "Redis state contradicts this relay");
	}
	if (stop_requested && !r->stopping) {
		r->stopping = true;
		r->stop_deadline = now + (int64_t)r->cf->shutdown_timeout_ms * 1000;
		log_info("stopping: waiting up to %d ms for %llu in-flight event(s)",
			 r->cf->shutdown_timeout_ms,
			 (unsigned long long)sink_redis_inflight_events(r->sink));
	}
	return true;
}

/*
 * (Re)connect what is down, when its backoff allows. Redis first: a Redis
 * that refuses us for good (credentials, ACL) must stop the relay before it
 * creates a slot that would then hold WAL for nobody.
 */
static bool step_connect(struct relay *r, int64_t now)
{
	int code;

	if (!sink_redis_connected(r->sink) && now >= r->redis_bo.next_us) {
		code = try_redis(r);
		if (code >= 0)
			return finish(r, code, "Redis setup failed");
	}
	/* The slot record, read at the first connect or again after a start
	 * found a gap: judge the slot against it before going on. */
	if (sink_redis_record_read(r->sink) &&
	    (!r->guard_set || (r->gap_wait && sink_redis_record_gen(r->sink) != r->gap_gen))) {
		code = record_arrived(r);
		if (code >= 0)
			return finish(r, code, "the slot is not the one this relay streamed");
	}
	if (!r->stopping && !pgrepl_streaming(r->pg) && !r->gap_wait && now >= r->pg_bo.next_us) {
		code = try_pg(r);
		if (code >= 0)
			return finish(r, code, "PostgreSQL setup failed");
	}
	return true;
}

/*
 * Take WAL messages while the window has room: XLogData decoded and queued,
 * keepalives beside them (a mark outside a transaction, an answer when the
 * server asks). *more: a full round was taken, poll without waiting.
 */
static bool step_wal(struct relay *r, int64_t now, bool *more)
{
	int i;

	*more = false;
	if (!pgrepl_streaming(r->pg) || r->stopping)
		return true;
	for (i = 0; i < MSGS_PER_ROUND && !sink_redis_full(r->sink); i++) {
		struct pg_msg m;
		int got = pgrepl_next(r->pg, &m);

		if (got == 0)
			break;
		if (got < 0) {
			pg_lost(r, pgrepl_errmsg(r->pg));
			break;
		}
		r->pg_bo.attempt = 0; /* the stream delivers: progress */
		r->last_pg_msg_us = now;
		if (m.type == 'k') {
			if (m.wal_end > r->received)
				r->received = m.wal_end;
			if (m.wal_end > r->server_wal_end)
				r->server_wal_end = m.wal_end;
			if (!r->in_txn &&
			    !confirm_mark(&r->cfm, sink_redis_last_seq(r->sink), m.wal_end, 0, 0))
				return out_of_memory(r);
			if (m.reply_requested) {
				advance_confirm(r);
				if (!send_status(r, false))
					pg_lost(r, pgrepl_errmsg(r->pg));
			}
		} else if (!handle_xlogdata(r, &m)) {
			return out_of_memory(r);
		}
	}
	*more = i == MSGS_PER_ROUND;
	return true;
}

/* Close the open batch (what this burst decoded goes out now), write, read replies. */
static bool step_redis(struct relay *r)
{
	if (!sink_redis_flush(r->sink, r->stopping))
		return out_of_memory(r);
	if (sink_redis_connected(r->sink) && sink_redis_want_write(r->sink) &&
	    !sink_redis_io(r->sink, NULL, 0))
		redis_lost(r, sink_redis_errmsg(r->sink));
	return true;
}

/*
 * Confirm what Redis acknowledged once the slot record covers it, and keep
 * the replication connection alive (--pg-timeout). Ends the run at --endpos
 * and when a drain is done.
 */
static bool step_confirm(struct relay *r, int64_t now)
{
	const struct relay_config *cf = r->cf;
	char lsnbuf[LSN_STRLEN];

	advance_confirm(r);
	if (!queue_record(r, r->stopping ||
				     (cf->endpos != LSN_INVALID && r->cfm.acked >= cf->endpos)))
		return out_of_memory(r);
	if (pgrepl_streaming(r->pg)) {
		bool moved = confirm_flush(&r->cfm) > r->cfm.confirmed;
		int64_t since = now - r->last_status_us;
		int64_t silent = now - r->last_pg_msg_us;

		if ((moved && since >= STATUS_MIN_GAP_US) ||
		    since >= (int64_t)cf->status_interval_ms * 1000) {
			/* Ask for an answer when the server has been quiet, so that
			 * silence means trouble for --pg-timeout. */
			if (!send_status(r, silent >= (int64_t)cf->status_interval_ms * 1000))
				pg_lost(r, pgrepl_errmsg(r->pg));
		}
		if (cf->pg_timeout_ms > 0 && pgrepl_streaming(r->pg) &&
		    silent > (int64_t)cf->pg_timeout_ms * 1000) {
			char why[128];

			snprintf(why, sizeof(why), "no message from the server within %d ms (--pg-timeout)",
				 cf->pg_timeout_ms);
			pg_lost(r, why);
		}
	}
	/* Past --endpos once Redis acknowledged it: the final status update
	 * confirms it, so there is no need to wait for the next one. */
	if (cf->endpos != LSN_INVALID && confirm_flush(&r->cfm) >= cf->endpos) {
		log_info("reached --endpos %s", lsn_format(cf->endpos, lsnbuf));
		return finish(r, EXIT_OK, "endpos reached");
	}
	if (r->stopping && ((sink_redis_inflight_events(r->sink) == 0 &&
			     (!r->guard_set || r->cfm.acked <= r->cfm.rec_acked)) ||
			    now >= r->stop_deadline)) {
		if (sink_redis_inflight_events(r->sink) > 0)
			log_warn("shutdown timeout: %llu event(s) unacknowledged; they are not "
				 "confirmed and will be delivered after restart",
				 (unsigned long long)sink_redis_inflight_events(r->sink));
		return false; /* rc and final_reason as they are: "signal" */
	}
	return true;
}

/* Stats, Redis memory, --trim acked rounds, what the servers warn about, the gauges. */
static bool step_housekeeping(struct relay *r, int64_t now)
{
	const struct relay_config *cf = r->cf;
	const char *notice;

	if (now - r->last_stats_us >= STATS_INTERVAL_US)
		log_stats(r, now);
	if (sink_redis_connected(r->sink) && now - r->memory_poll_us >= MEMORY_POLL_US) {
		sink_redis_poll_memory(r->sink);
		r->memory_poll_us = now;
	}
	if (sink_redis_connected(r->sink) && now - r->trim_us >= (int64_t)cf->trim_interval_ms * 1000) {
		if (sink_redis_trim_start(r->sink) < 0) {
			log_error("out of memory");
			return finish(r, EXIT_FAILURE_RUNTIME, "out of memory");
		}
		r->trim_us = now;
	}
	trim_finished(r);
	/* What the server warns about (one line; the same text at most once per
	 * stats interval). */
	notice = pgrepl_take_notice(r->pg);
	if (notice &&
	    (strcmp(notice, r->last_notice) != 0 || now - r->last_notice_us >= STATS_INTERVAL_US)) {
		log_warn("PostgreSQL says: %s", notice);
		snprintf(r->last_notice, sizeof(r->last_notice), "%s", notice);
		r->last_notice_us = now;
	}
	/* Entries a stream key refused went to the dead-letter stream. */
	if (sink_redis_stats(r->sink)->rejected > r->rejected_seen &&
	    now - r->rejected_log_us >= STATS_INTERVAL_US) {
		uint64_t n = sink_redis_stats(r->sink)->rejected - r->rejected_seen;

		r->rejected_seen += n;
		r->rejected_log_us = now;
		log_warn("Redis refused %llu entr%s for a stream key that holds another type "
			 "(WRONGTYPE): dead-lettered to %s (in a Redis Cluster, to %s{<tag>} when "
			 "that is in another slot)",
			 (unsigned long long)n, n == 1 ? "y" : "ies", cf->dead_letter_stream,
			 cf->dead_letter_stream);
	}
	/* What /metrics and the probes see while we sleep. */
	publish_gauges(r, now, r->stopping);
	return true;
}

/* When the loop must turn again at the latest: the next status, record write, retry or deadline. */
static int wait_ms(const struct relay *r, int64_t now)
{
	int64_t next = now + 1000000;

	if (pgrepl_streaming(r->pg)) {
		int64_t due = r->last_status_us + (int64_t)r->cf->status_interval_ms * 1000;

		if (confirm_flush(&r->cfm) > r->cfm.confirmed)
			due = r->last_status_us + STATUS_MIN_GAP_US;
		if (due < next)
			next = due;
		/* the next slot record write, when one is due */
		due = r->rec_last_us + STATUS_MIN_GAP_US;
		if (r->guard_set && confirm_record_due(&r->cfm) && due < next)
			next = due;
	} else if (!r->stopping && r->pg_bo.next_us < next) {
		next = r->pg_bo.next_us;
	}
	if (!sink_redis_connected(r->sink) && r->redis_bo.next_us < next)
		next = r->redis_bo.next_us;
	if (r->stopping && r->stop_deadline < next)
		next = r->stop_deadline;
	return next <= now ? 0 : (int)((next - now + 999) / 1000);
}

/* Wait for the sockets (or the next deadline), then take what they have. */
static bool step_wait(struct relay *r, int64_t now, bool more)
{
	struct pollfd pfd[1 + MAX_REDIS_FDS];
	int npfd = 0, pg_i = -1, rd_i = -1, nrd = 0;

	if (pgrepl_streaming(r->pg) && !r->stopping && !sink_redis_full(r->sink)) {
		pg_i = npfd;
		pfd[npfd++] = (struct pollfd){.fd = pgrepl_fd(r->pg), .events = POLLIN};
	}
	if (sink_redis_connected(r->sink)) {
		rd_i = npfd;
		nrd = sink_redis_pollfds(r->sink, pfd + npfd, MAX_REDIS_FDS);
		npfd += nrd;
	}
	if (poll(pfd, (nfds_t)npfd, more ? 0 : wait_ms(r, now)) < 0) {
		if (errno == EINTR)
			return true;
		log_error("poll failed: %s", strerror(errno));
		return finish(r, EXIT_FAILURE_RUNTIME, "poll failed");
	}
	if (pg_i >= 0 && (pfd[pg_i].revents & (POLLIN | POLLERR | POLLHUP)) &&
	    !pgrepl_consume(r->pg))
		pg_lost(r, pgrepl_errmsg(r->pg));
	if (rd_i >= 0 && !sink_redis_io(r->sink, pfd + rd_i, nrd))
		redis_lost(r, sink_redis_errmsg(r->sink));
	if (sink_redis_connected(r->sink) && !sink_redis_check_stall(r->sink, time_mono_us()))
		redis_lost(r, sink_redis_errmsg(r->sink));
	return true;
}

/* One turn of the loop; false when the run is over (r->rc, r->final_reason, r->oom say how). */
static bool relay_turn(struct relay *r)
{
	int64_t now = time_mono_us();
	bool more;

	return step_stop(r, now) && step_connect(r, now) && step_wal(r, now, &more) &&
	       step_redis(r) && step_confirm(r, now) && step_housekeeping(r, now) &&
	       step_wait(r, now, more);
}

/*
 * One run of the relay. *refused: in, the size from which values are
 * dead-lettered (0: no such limit); out, when Redis refused a value Redis
 * would refuse again, its size (relay_run then runs again), else unchanged.
 */
static int relay_run_once(const struct relay_config *cf, uint64_t *refused)
{
	struct relay r = {.cf = cf, .refused = *refused};
	char err[512];

	srandom((unsigned)(time_now_us() ^ getpid()));
	log_set_context("slot", cf->slot);
	install_signals();
	r.map = mapper_create(cf, err, sizeof(err));
	if (!r.map) {
		log_error("invalid --stream: %s", err);
		return EXIT_USAGE;
	}
	r.m = metrics_create();
	r.pg = pgrepl_create(cf);
	r.sink = sink_redis_create(cf, r.m);
	r.dec = w2j_create();
	if (!r.m || !r.pg || !r.sink || !r.dec) {
		log_error("out of memory at startup");
		relay_free(&r);
		return EXIT_FAILURE_RUNTIME;
	}
	if (cf->http_addr && cf->http_addr[0]) {
		/* "Stuck" must allow a blocking connect attempt (PostgreSQL's
		 * connect_timeout, Redis's timeout) plus slack. */
		int stuck_ms = 60000 + 2 * cf->redis_timeout_ms;

		r.http = metrics_server_start(r.m, cf->http_addr, cf->slot, stuck_ms, err, sizeof(err));
		if (!r.http) {
			log_error("%s", err);
			relay_free(&r);
			return EXIT_USAGE;
		}
		log_info("serving /metrics, /healthz and /readyz on %s (port %d)", cf->http_addr,
			 metrics_server_port(r.http));
	}
	r.last_stats_us = time_mono_us();
	r.final_reason = "signal";
	while (relay_turn(&r))
		;
	if (r.oom) {
		log_error("out of memory; exiting without confirming anything further");
		log_final(&r, "out of memory");
		relay_free(&r);
		return EXIT_FAILURE_RUNTIME;
	}

	advance_confirm(&r);
	/* After Redis lost acknowledged writes, confirm nothing more: what is
	 * not confirmed yet is sent again by the next start. */
	if (r.redis_fatal)
		confirm_freeze(&r.cfm);
	if (pgrepl_streaming(r.pg)) {
		/* What is left of --shutdown-timeout, but at least 1 s: enough for
		 * the server's answer to CopyDone on a live connection. */
		int64_t left = r.stopping ? (r.stop_deadline - time_mono_us()) / 1000 : 0;

		pgrepl_stop(r.pg, r.received, confirm_flush(&r.cfm), left > 1000 ? (int)left : 1000);
	}
	confirm_sent(&r.cfm, confirm_flush(&r.cfm));
	log_final(&r, r.final_reason);
	if (r.refused_now)
		*refused = r.refused_now;
	relay_free(&r);
	return r.rc;
}

/*
 * Redis drops the connection on a value over its proto-max-bulk-len, so
 * that call would fail after every reconnect and every restart. When the
 * relay cannot read the limit (CONFIG GET denied), it learns it from the
 * refusal: it stops (confirming only what Redis acknowledged) and runs
 * again from the slot's position with values of the refused size
 * dead-lettered, so the stream goes on without an operator.
 */
int relay_run(const struct relay_config *cf)
{
	uint64_t refused = 0;

	for (;;) {
		uint64_t before = refused;
		int rc = relay_run_once(cf, &refused);

		if (refused == before || stop_requested)
			return rc;
		log_warn("running again from the last confirmed position, with field values of %llu "
			 "bytes or more dead-lettered: Redis refuses them (its proto-max-bulk-len is "
			 "lower); raise proto-max-bulk-len, or set --max-event-bytes below it",
			 (unsigned long long)refused);
	}
}

/* --check-config's connecting part: every item one line, then the count. */
static int check_prerequisites(const struct relay_config *cf, FILE *out)
{
	struct preflight pf = {0};
	int rc;

	preflight_run(cf, &pf);
	for (size_t i = 0; i < pf.nitems; i++)
		fprintf(out, "%s: %s\n", preflight_kind_name(pf.items[i].kind), pf.items[i].text);
	if (pf.oom)
		fprintf(out, "warning: out of memory: some items are missing above\n");
	fprintf(out, "%zu problem(s) found\n", pf.nproblems);
	if (pf.nproblems == 0)
		fprintf(out, "configuration OK\n");
	rc = pf.nproblems ? EXIT_CHECK_PROBLEMS : EXIT_OK;
	preflight_finish(&pf);
	return rc;
}

int relay_check_config(const struct relay_config *cf, FILE *out)
{
	char err[512], where[300], lsnbuf[LSN_STRLEN];
	struct stream_tmpl *t = stream_tmpl_compile(cf->stream, err, sizeof(err));

	if (!t) {
		log_error("invalid --stream: %s", err);
		return EXIT_USAGE;
	}
	stream_tmpl_free(t);
	fprintf(out, cf->check_config_offline ? "configuration OK\n" : "options OK\n");
	fprintf(out, "  slot             %s (%s)\n", cf->slot,
		cf->create_slot ? "created when missing" : "must exist");
	fprintf(out, "  table            %s\n", cf->table);
	fprintf(out, "  message prefix   %s\n", cf->message_prefix);
	fprintf(out, "  redis            %s\n", redis_target_describe(&cf->redis, where, sizeof(where)));
	fprintf(out, "  stream           %s\n", cf->stream);
	fprintf(out, "  dead letters     %s\n", cf->dead_letter_stream);
	fprintf(out, "  dedup window     %llds\n", (long long)cf->dedup_window_s);
	fprintf(out, "  groups           %zu\n", cf->ngroups);
	fprintf(out, "  http             %s\n", cf->http_addr && cf->http_addr[0] ? cf->http_addr : "off");
	if (cf->endpos != LSN_INVALID)
		fprintf(out, "  endpos           %s\n", lsn_format(cf->endpos, lsnbuf));
	if (cf->check_config_offline)
		return EXIT_OK;
	return check_prerequisites(cf, out);
}
