/*
 * relay_wal.c - WAL messages to events: each XLogData message decoded
 * (wal2json), BEGIN/COMMIT kept as the transaction and its commit mark,
 * outbox rows and logical messages mapped and queued to Redis, what cannot
 * be mapped dead-lettered.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exitcode.h"
#include "log.h"
#include "pg_facts.h"
#include "relay_int.h"

/*
 * held (not NULL): the message whose buffer the sink may keep for the large
 * values that lie inside it (sink_redis.h says who owns what): wal2json's,
 * decoded in place in libpq's buffer (pgrepl_take_buffer()), or a large
 * pgoutput message read back from the transaction spool's file into an
 * allocation of its own (txn_spool_take_buffer()); values anywhere else are
 * copied.
 */
static bool relay_queue_event(struct relay *r, const struct event *ev, bool dead,
                              const struct pg_msg *held)
{
	struct sink_hold hold = {NULL, held ? held->data : NULL, held ? held->len : 0, free};
	bool ok;

	if (held && r->pgoutput)
		hold.p = txn_spool_buffer(r->spool);
	else if (held)
		hold = (struct sink_hold){pgrepl_buffer(r->pg), held->data, held->len, pgrepl_free_buffer};
	ok = sink_redis_publish_held(r->sink, ev, dead, &hold);
	if (held && !hold.p) /* the sink keeps it now */
		(void)(r->pgoutput ? txn_spool_take_buffer(r->spool) : pgrepl_take_buffer(r->pg));
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
	             "dead-lettering an event of the transaction committing at %s: %s", lsnbuf, reason);
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
	return relay_queue_event(r, &ev, true, NULL);
}

enum map_result relay_map_event(struct mapper *m, const struct relay_config *cf,
                                const struct txn_info *tx, uint32_t index,
                                const struct w2j_field *fields, size_t n, const char *raw,
                                size_t len, uint64_t max_value, struct event *ev,
                                const char **reason, char *why, size_t whylen)
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
			         ev->fields[i].name, ev->fields[i].value_len, (unsigned long long)max_value);
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

/*
 * A pgoutput change written as wal2json (format-version 2) would print it, so
 * that a dead letter's raw reads the same on both plugins (pgoutput's own
 * bytes are binary). Only the first DEAD_RAW_MAX + 8 bytes are kept in b (a
 * dead letter keeps at most DEAD_RAW_MAX); the return value is the whole
 * rendering's length, what raw_bytes reports.
 */
struct raw_out {
	struct buf *b;
	size_t total;
};

static void raw_put(struct raw_out *o, const char *s, size_t n)
{
	size_t room = DEAD_RAW_MAX + 8 > o->b->len ? DEAD_RAW_MAX + 8 - o->b->len : 0;

	buf_append(o->b, s, n < room ? n : room);
	o->total += n;
}

/* A string literal (its length known at compile time). */
#define RAW_LIT(o, lit) raw_put((o), (lit), sizeof(lit) - 1)

/* s as a JSON string, escaped as PostgreSQL's escape_json() (which wal2json uses) does. */
static void raw_put_str(struct raw_out *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t from = 0;

	RAW_LIT(o, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		raw_put(o, s + from, i - from);
		from = i + 1;
		switch (c) {
		case '"':
		case '\\':
			esc[1] = (char)c;
			break;
		case '\b':
			esc[1] = 'b';
			break;
		case '\f':
			esc[1] = 'f';
			break;
		case '\n':
			esc[1] = 'n';
			break;
		case '\r':
			esc[1] = 'r';
			break;
		case '\t':
			esc[1] = 't';
			break;
		default:
			raw_put(o, esc, 6);
			continue;
		}
		raw_put(o, esc, 2);
	}
	raw_put(o, s + from, n - from);
	RAW_LIT(o, "\"");
}

static size_t render_pgo_raw(struct buf *b, const struct w2j_change *ch, const struct txn_info *tx)
{
	struct raw_out o = {b, 0};
	char num[LSN_STRLEN];

	buf_reset(b);
	/* wal2json's order with the relay's options: action, xid, timestamp, lsn, then the rest. */
	if (ch->action == W2J_MESSAGE)
		RAW_LIT(&o, "{\"action\":\"M\"");
	else
		RAW_LIT(&o, "{\"action\":\"I\"");
	if (tx->has_xid) {
		snprintf(num, sizeof(num), "%u", tx->xid);
		RAW_LIT(&o, ",\"xid\":");
		raw_put(&o, num, strlen(num));
	}
	if (tx->committed_at) {
		RAW_LIT(&o, ",\"timestamp\":");
		raw_put_str(&o, tx->committed_at, tx->committed_at_len);
	}
	if (ch->lsn != LSN_INVALID) {
		lsn_format(ch->lsn, num);
		RAW_LIT(&o, ",\"lsn\":");
		raw_put_str(&o, num, strlen(num));
	}
	if (ch->action == W2J_MESSAGE) {
		RAW_LIT(&o, ",\"transactional\":");
		if (ch->transactional)
			RAW_LIT(&o, "true");
		else
			RAW_LIT(&o, "false");
		RAW_LIT(&o, ",\"prefix\":");
		raw_put_str(&o, ch->prefix ? ch->prefix : "", ch->prefix ? strlen(ch->prefix) : 0);
		RAW_LIT(&o, ",\"content\":");
		raw_put_str(&o, ch->content, ch->content_len);
		RAW_LIT(&o, "}");
		return o.total;
	}
	RAW_LIT(&o, ",\"schema\":");
	raw_put_str(&o, ch->schema, ch->schema_len);
	RAW_LIT(&o, ",\"table\":");
	raw_put_str(&o, ch->table, ch->table_len);
	RAW_LIT(&o, ",\"columns\":[");
	for (size_t i = 0; i < ch->ncolumns; i++) {
		const struct w2j_field *f = &ch->columns[i];

		if (i)
			RAW_LIT(&o, ",");
		RAW_LIT(&o, "{\"name\":");
		raw_put_str(&o, f->name, f->name_len);
		RAW_LIT(&o, ",\"type\":");
		raw_put_str(&o, f->type ? f->type : "", f->type ? f->type_len : 0);
		RAW_LIT(&o, ",\"value\":");
		if (f->kind == W2J_KIND_STRING)
			raw_put_str(&o, f->value, f->value_len);
		else if (f->kind == W2J_KIND_NULL)
			RAW_LIT(&o, "null");
		else
			raw_put(&o, f->value, f->value_len);
		RAW_LIT(&o, "}");
	}
	RAW_LIT(&o, "]}");
	return o.total;
}

/* ch: the change, whose raw a pgoutput dead letter renders (raw is NULL then). */
static bool map_and_queue(struct relay *r, const struct w2j_change *ch,
                          const struct w2j_field *fields, size_t n, const char *raw, size_t len,
                          const struct pg_msg *held)
{
	const char *reason = NULL;
	char why[200];
	struct event ev;
	enum map_result mr;
	uint64_t mv = sink_redis_max_value(r->sink);
	uint32_t index = r->next_index++;

	if (r->refused && (!mv || r->refused - 1 < mv))
		mv = r->refused - 1;
	mr = relay_map_event(r->map, r->cf, &r->tx, index, fields, n, raw, len, mv, &ev, &reason, why,
	                     sizeof(why));
	if (mr == MAP_DEAD_LETTER && !raw && !mapper_failed(r->map)) {
		/* Mapped again with the rendering: only dead letters pay for it. */
		len = render_pgo_raw(&r->pgo_raw, ch, &r->tx);
		if (r->pgo_raw.failed) {
			log_error("out of memory rendering a dead letter's raw");
			return false;
		}
		mr = relay_map_event(r->map, r->cf, &r->tx, index, fields, n, r->pgo_raw.data, len, mv, &ev,
		                     &reason, why, sizeof(why));
	}
	if (mapper_failed(r->map)) {
		log_error("out of memory mapping an event");
		return false;
	}
	if (mr == MAP_DEAD_LETTER)
		warn_dead_letter(r, reason);
	return relay_queue_event(r, &ev, mr == MAP_DEAD_LETTER, mr == MAP_EVENT ? held : NULL);
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

/* How wal2json (format-version 2) starts an INSERT; the NUL is not compared. */
#define INSERT_PREFIX "{\"action\":\"I\""
#define INSERT_PREFIX_LEN (sizeof(INSERT_PREFIX) - 1)

/* One decoded change. raw/rawlen: the message as it came (dead letters keep
 * it); held: the message whose buffer the sink may keep (NULL: copy). */
static bool handle_change(struct relay *r, const struct pg_msg *m, const struct w2j_change *ch,
                          const char *raw, size_t rawlen, const struct pg_msg *held)
{
	char lsnbuf[LSN_STRLEN];

	switch (ch->action) {
	case W2J_BEGIN:
		if (ch->nextlsn == LSN_INVALID) {
			log_error("wal2json BEGIN at %s has no \"nextlsn\"; is include-lsn ignored?",
			          lsn_format(m->data_start, lsnbuf));
			return false;
		}
		begin_txn(r, ch, m->data_start);
		return true;
	case W2J_COMMIT:
		r->in_txn = false;
		relay_count(&r->m->transactions);
		/* dataStart of C is the commit record's end: the LSN to confirm. */
		return confirm_mark(&r->cfm, sink_redis_last_seq(r->sink), m->data_start,
		                    r->next_index > 0 ? m->data_start : LSN_INVALID,
		                    r->tx.committed_unix_us);
	case W2J_INSERT:
		if (!is_outbox_table(r, ch))
			return true;
		if (!r->in_txn) {
			log_error("INSERT at %s outside a transaction; wal2json must run with "
			          "include-transaction",
			          lsn_format(m->data_start, lsnbuf));
			return false;
		}
		/* Dead letters keep the row as it came, before decoding changed it
		 * (pgoutput: rendered as wal2json prints it, raw is NULL). */
		return map_and_queue(r, ch, ch->columns, ch->ncolumns, raw, rawlen, held);
	case W2J_UPDATE:
		relay_count(&r->m->ignored[IGN_UPDATE]);
		return true;
	case W2J_DELETE:
		relay_count(&r->m->ignored[IGN_DELETE]);
		return true;
	case W2J_TRUNCATE:
		relay_count(&r->m->ignored[IGN_TRUNCATE]);
		return true;
	case W2J_MESSAGE:
		/* pgoutput sends every prefix; wal2json those of add-msg-prefixes, a list it
		 * splits (config.c refuses what it would split; compared here on both). */
		if (!ch->prefix || strcmp(ch->prefix, r->cf->message_prefix) != 0)
			return true;
		if (!ch->transactional || !r->in_txn) {
			relay_count(&r->m->ignored[IGN_MESSAGE]);
			log_warn("skipping a non-transactional logical message with prefix \"%s\" at "
			         "%s: only pg_logical_emit_message(true, ...) is delivered",
			         ch->prefix ? ch->prefix : "", lsn_format(m->data_start, lsnbuf));
			if (!r->in_txn)
				return confirm_mark(&r->cfm, sink_redis_last_seq(r->sink), m->data_start, 0, 0);
			return true;
		} else {
			struct w2j_field *fields;
			size_t n;

			/* content lives in the decoder, which the next decode reuses. */
			buf_reset(&r->content);
			buf_append(&r->content, ch->content, ch->content_len);
			if (r->content.failed)
				return false;
			if (!w2j_decode_object(r->dec, r->content.data, r->content.len, &fields, &n)) {
				char reason[600];

				const char *e = w2j_errmsg(r->dec);

				if (w2j_out_of_memory(r->dec)) {
					log_error("out of memory decoding a logical message's content");
					return false;
				}

				if (strstr(e, "not a JSON object"))
					snprintf(reason, sizeof(reason), "%s", e);
				else
					snprintf(reason, sizeof(reason), "message content is not a JSON object: %s", e);
				if (!raw) {
					rawlen = render_pgo_raw(&r->pgo_raw, ch, &r->tx);
					raw = r->pgo_raw.data;
				}
				return dead_letter(r, DEAD_NOT_JSON, reason, raw, rawlen);
			}
			return map_and_queue(r, ch, fields, n, raw, rawlen, NULL);
		}
	}
	return true;
}

/* A message no decoder could read: dead-lettered in its transaction, or at its own LSN. */
static bool undecodable(struct relay *r, const struct pg_msg *m, const char *plugin,
                        const char *err, const char *raw, size_t len)
{
	char reason[600];

	snprintf(reason, sizeof(reason), "undecodable %s output: %s", plugin, err);
	if (!r->in_txn) {
		/* Outside B..C there is no transaction to attach it to; keep it
		 * anyway, positioned at its own LSN. */
		r->tx = (struct txn_info){.commit_lsn = m->data_start};
		r->next_index = 0;
	}
	return dead_letter(r, DEAD_UNDECODABLE, reason, raw, len);
}

/*
 * pgoutput names a domain by its base type (its Type message), wal2json by the
 * domain's name: before each Relation message, which the columns' names come
 * from, the decoder learns the names of the outbox table's domains as start
 * read them (pg_facts.h; a domain column added while the relay runs is named
 * by its base type until the next start). False when out of memory.
 */
static bool name_domains(struct relay *r)
{
	const struct pg_table *t = pgrepl_table_columns(r->pg);

	for (int i = 0; i < t->ncols; i++) {
		if (t->cols[i].domain && !pgo_set_type_name(r->pgo, t->cols[i].oid, t->cols[i].domain)) {
			log_error("out of memory naming the outbox table's domain types");
			return false;
		}
	}
	return true;
}

/* One pgoutput message decoded and handled, with every change it carries. own: it was
 * read back from the spool's file into a buffer of its own, which the sink may keep. */
static bool pgo_handle(struct relay *r, const struct pg_msg *m, lsn_t commit_end, bool own)
{
	struct w2j_change ch;
	bool has;
	const struct pg_msg *held = own ? m : NULL;

	if (m->len > 0 && m->data[0] == 'R' && !name_domains(r))
		return false;
	if (!pgo_decode(r->pgo, m->data, m->len, m->data_start, &ch, &has)) {
		if (pgo_out_of_memory(r->pgo)) { /* not the message's fault: no dead letter */
			log_error("out of memory decoding pgoutput output");
			return false;
		}
		return undecodable(r, m, "pgoutput", pgo_errmsg(r->pgo), m->data, m->len);
	}
	while (has) {
		if (ch.action == W2J_BEGIN)
			ch.nextlsn = commit_end; /* what wal2json's BEGIN says */
		if (!handle_change(r, m, &ch, NULL, 0, held))
			return false;
		has = pgo_next(r->pgo, &ch); /* a TRUNCATE of several tables */
	}
	return true;
}

/* The commit record's end in a pgoutput Commit ('C', flags, commit LSN, end LSN, time). */
static lsn_t commit_end_of(const char *d, size_t len)
{
	uint64_t v = 0;

	if (len < 26 || d[0] != 'C')
		return LSN_INVALID;
	for (int i = 0; i < 8; i++)
		v = v << 8 | (unsigned char)d[10 + i];
	return (lsn_t)v;
}

/* The held transaction in r->spool is read from its start (what: how the log names it). */
static bool replay_start(struct relay *r, const char *what)
{
	if (txn_spool_spilled(r->spool))
		log_info("%s of %zu messages (%llu bytes) was held until its commit, %llu bytes of it in "
		         "a temporary file",
		         what, txn_spool_count(r->spool), (unsigned long long)txn_spool_bytes(r->spool),
		         (unsigned long long)txn_spool_spilled(r->spool));
	r->replaying = txn_spool_rewind(r->spool);
	sink_redis_held(r->sink, txn_spool_count(r->spool));
	if (!r->replaying)
		log_error("reading back a pgoutput transaction: %s", txn_spool_errmsg(r->spool));
	return r->replaying;
}

/* ---- pgoutput streaming: see pgoutput.h and struct relay's streams ---- */

/* Memory of one streamed transaction's spool: it is large by nature, so it goes to its file
 * early, and several may be open at once. */
#define STREAM_MEM ((size_t)1 << 20)

static void stream_drop(struct relay *r, size_t i)
{
	txn_spool_destroy(r->streams[i].spool);
	free(r->streams[i].aborted);
	if (r->block == (long)i)
		r->block = -1;
	r->streams[i] = r->streams[--r->nstreams];
	if (r->block == (long)r->nstreams)
		r->block = (long)i; /* the open block's entry moved into i */
}

static long stream_find(const struct relay *r, uint32_t xid)
{
	for (size_t i = 0; i < r->nstreams; i++)
		if (r->streams[i].xid == xid)
			return (long)i;
	return -1;
}

/* The end of a streamed transaction's replay: r->spool is its own again. */
static void stream_replay_done(struct relay *r)
{
	if (!r->replay_streamed)
		return;
	txn_spool_destroy(r->spool);
	r->spool = r->spool_idle;
	r->spool_idle = NULL;
	free(r->replay_aborted);
	r->replay_aborted = NULL;
	r->replay_naborted = 0;
	r->replay_streamed = false;
}

/* See relay_int.h. */
void relay_pgo_streams_reset(struct relay *r)
{
	while (r->nstreams)
		stream_drop(r, r->nstreams - 1);
	free(r->streams);
	r->streams = NULL;
	r->block = -1;
	stream_replay_done(r);
}

static bool stream_aborted(const struct relay *r, uint32_t xid)
{
	for (size_t i = 0; i < r->replay_naborted; i++)
		if (r->replay_aborted[i] == xid)
			return true;
	return false;
}

/* Stream Start, Stop, Abort and Commit. */
static bool handle_stream(struct relay *r, const struct pg_msg *m, const struct pgo_stream_msg *sm)
{
	long i = stream_find(r, sm->xid);

	switch (sm->kind) {
	case PGO_STREAM_START:
		if (i < 0) {
			struct pgo_held *grown = realloc(r->streams, (r->nstreams + 1) * sizeof(*grown));
			struct txn_spool *sp = txn_spool_create(
			    r->cf->txn_memory < (int64_t)STREAM_MEM ? (size_t)r->cf->txn_memory : STREAM_MEM,
			    NULL);

			if (grown)
				r->streams = grown;
			if (!grown || !sp) {
				txn_spool_destroy(sp);
				return false;
			}
			i = (long)r->nstreams++;
			r->streams[i] = (struct pgo_held){.xid = sm->xid, .spool = sp};
		} else if (sm->first) {
			/* the server starts this transaction over: what was held of it goes */
			txn_spool_clear(r->streams[i].spool);
			r->streams[i].naborted = 0;
		}
		r->block = i;
		return true;
	case PGO_STREAM_STOP:
		r->block = -1;
		return true;
	case PGO_STREAM_ABORT:
		if (i < 0)
			return true; /* nothing of it came */
		if (sm->subxid == sm->xid) {
			stream_drop(r, (size_t)i);
		} else {
			struct pgo_held *h = &r->streams[i];
			uint32_t *grown = realloc(h->aborted, (h->naborted + 1) * sizeof(*grown));

			if (!grown)
				return false;
			h->aborted = grown;
			h->aborted[h->naborted++] = sm->subxid;
		}
		return true;
	case PGO_STREAM_COMMIT:
		break;
	case PGO_NOT_STREAM:
		return true;
	}
	r->block = -1;
	if (i < 0)
		return undecodable(r, m, "pgoutput", "a Stream Commit of a transaction never streamed",
		                   m->data, m->len);
	{
		struct pgo_held h = r->streams[i];
		char begin[PGO_BEGIN_LEN];
		struct pg_msg bm = {
		    .type = 'w', .data_start = sm->commit_lsn, .data = begin, .len = sizeof(begin)};

		r->streams[i].spool = NULL;
		r->streams[i].aborted = NULL;
		stream_drop(r, (size_t)i);
		r->spool_idle = r->spool;
		r->spool = h.spool;
		r->replay_aborted = h.aborted;
		r->replay_naborted = h.naborted;
		r->replay_streamed = true;
		r->replay_commit = *sm;
		r->replay_end = sm->end_lsn;
		if (!replay_start(r, "a streamed pgoutput transaction"))
			return false;
		pgo_stream_begin(sm, begin);
		if (!pgo_handle(r, &bm, r->replay_end, false))
			return false;
	}
	return relay_pgoutput_replay(r);
}

/*
 * pgoutput: a transaction is held from its Begin to its Commit (txn_spool.h);
 * at the Commit, which is held too, it is replayed: relay_pgoutput_replay()
 * decodes and handles the held messages in order, with the commit end their
 * events need, as far as the sink's window allows each round.
 */
static bool handle_pgoutput(struct relay *r, const struct pg_msg *m)
{
	char kind = m->len ? m->data[0] : '\0';
	struct pgo_stream_msg sm;
	char err[200];

	if (!pgo_stream_parse(m->data, m->len, &sm, err, sizeof(err)))
		return undecodable(r, m, "pgoutput", err, m->data, m->len);
	if (sm.kind != PGO_NOT_STREAM)
		return handle_stream(r, m, &sm);
	if (r->block >= 0) {
		/* inside a block: held as it came, unwrapped when it is replayed */
		if (!txn_spool_add(r->streams[r->block].spool, m->data, m->len, m->data_start)) {
			log_error("holding a streamed pgoutput transaction until its commit: %s",
			          txn_spool_errmsg(r->streams[r->block].spool));
			return false;
		}
		return true;
	}

	if (kind == 'B' && !r->spooling) {
		txn_spool_clear(r->spool);
		r->spooling = true;
	}
	if (!r->spooling)
		return pgo_handle(r, m, LSN_INVALID, false); /* outside a transaction: a message */
	if (!txn_spool_add(r->spool, m->data, m->len, m->data_start)) {
		log_error("holding a pgoutput transaction until its commit: %s",
		          txn_spool_errmsg(r->spool));
		return false;
	}
	if (kind != 'C')
		return true;
	r->spooling = false;
	r->replay_end = commit_end_of(m->data, m->len);
	if (r->replay_end == LSN_INVALID) {
		txn_spool_clear(r->spool);
		return undecodable(r, m, "pgoutput", "a Commit message without its end LSN", m->data,
		                   m->len);
	}
	if (!replay_start(r, "a pgoutput transaction"))
		return false;
	return relay_pgoutput_replay(r);
}

/* See relay_int.h. */
bool relay_pgoutput_replay(struct relay *r)
{
	for (unsigned k = 1; r->replaying && !sink_redis_full(r->sink); k++) {
		const char *data;
		size_t len;
		lsn_t at;
		int got = txn_spool_next(r->spool, &data, &len, &at);

		if (got < 0) {
			log_error("reading back a pgoutput transaction: %s", txn_spool_errmsg(r->spool));
			return false;
		}
		if (got == 0) {
			r->replaying = false;
			sink_redis_held(r->sink, 0);
			txn_spool_clear(r->spool);
			if (r->replay_streamed) {
				/* the Commit protocol 1 would have sent */
				char commit[PGO_COMMIT_LEN];
				struct pg_msg cm = {.type = 'w',
				                    .data_start = r->replay_commit.end_lsn,
				                    .data = commit,
				                    .len = sizeof(commit)};
				bool ok;

				pgo_stream_commit(&r->replay_commit, commit);
				ok = pgo_handle(r, &cm, r->replay_end, false);
				stream_replay_done(r);
				if (!ok)
					return false;
			}
			break;
		}
		{
			/* the spool's own bytes until the next read: unwrapping may change them */
			struct pg_msg held = {.type = 'w', .data_start = at, .data = (char *)data, .len = len};
			bool own = txn_spool_buffer(r->spool) == data;

			sink_redis_held_next(r->sink);

			if (r->replay_streamed) {
				uint32_t xid;
				size_t skip;

				if (!pgo_stream_unwrap(held.data, held.len, &xid, &skip)) {
					if (!undecodable(r, &held, "pgoutput", "a streamed message without its xid",
					                 held.data, held.len))
						return false;
					continue;
				}
				if (xid && stream_aborted(r, xid))
					continue; /* a subtransaction rolled back */
				held.data += skip;
				held.len -= skip;
			}
			if (!pgo_handle(r, &held, r->replay_end, own))
				return false;
		}
		if (k % REDIS_SERVICE_EVERY == 0)
			relay_service_redis(r);
	}
	return true;
}

/* Returns false only on a fatal (out-of-memory) failure. */
bool relay_handle_xlogdata(struct relay *r, const struct pg_msg *m)
{
	struct w2j_change ch;
	const char *raw; /* the message as it came (decoding in place changes it) */
	size_t rawlen;
	bool inplace = m->len >= W2J_INPLACE_MIN;

	if (m->data_start > r->received)
		r->received = m->data_start;
	sink_redis_backlog_at(r->sink, m->data_start);
	if (r->pgoutput)
		return handle_pgoutput(r, m);
	if ((int64_t)m->len > r->cf->max_event_bytes && r->in_txn && m->len > INSERT_PREFIX_LEN &&
	    memcmp(m->data, INSERT_PREFIX, INSERT_PREFIX_LEN) == 0) {
		/* An outbox row (add-tables lets no other through) too big to publish:
		 * dead-lettered without decoding it, so it costs no more memory than
		 * libpq's own copies. */
		char reason[200];

		snprintf(reason, sizeof(reason),
		         "row is %zu bytes of wal2json, over --max-event-bytes %lld", m->len,
		         (long long)r->cf->max_event_bytes);
		return dead_letter(r, DEAD_TOO_LARGE, reason, m->data, m->len);
	}
	/* A large row is decoded in its own buffer, which may then go to Redis as it is. */
	if (!(inplace ? w2j_decode_inplace(r->dec, m->data, m->len, DEAD_RAW_MAX + 4, &ch)
	              : w2j_decode(r->dec, m->data, m->len, &ch))) {
		if (w2j_out_of_memory(r->dec)) { /* not the row's fault: no dead letter */
			log_error("out of memory decoding wal2json output");
			return false;
		}
		return undecodable(r, m, "wal2json", w2j_errmsg(r->dec), m->data, m->len);
	}
	/* Read now: the next decode (a message's content) forgets it. */
	raw = inplace ? w2j_original(r->dec, &rawlen) : NULL;
	if (!raw)
		raw = m->data;
	return handle_change(r, m, &ch, raw, m->len, inplace ? m : NULL);
}
