/*
 * status.c - `outbox-relay status`: report the replication slot and the
 * Redis streams, then exit.
 *
 * Options are the relay's rows on the option engine (config_load_as() with
 * CONFIG_CMD_STATUS), so the status command takes the relay's flags and
 * OUTBOX_RELAY_* environment unchanged (`kubectl exec deploy/outbox-relay --
 * outbox-relay status` just works); --stream-pattern is a row only this
 * command accepts.
 *
 * PostgreSQL is asked through a normal (non-replication) connection, so the
 * report works while the relay is streaming from the slot; the slot is read
 * by pg_slot_read(), as the relay, --check-config and heal read it. Redis streams are
 * found with SCAN MATCH ... TYPE stream and described with XINFO STREAM and
 * XINFO GROUPS; the relay's watermark for the slot is read with GET. Redis
 * is one server, the Sentinels' master or a Redis Cluster, through
 * rclient.h: in a cluster every master is scanned and every key is asked of
 * the master of its hash slot (MOVED and ASK are followed).
 *
 * This is command code: it prints the report to stdout, problems inline,
 * and never a password (only host, port, database and user of the
 * PostgreSQL connection, and redis_target_describe() for Redis).
 */
#include "status.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "buf.h"
#include "config.h"
#include "consumer_metrics.h"
#include "event.h"
#include "exitcode.h"
#include "lsn.h"
#include "pg_facts.h"
#include "rclient.h"
#include "sink_redis.h"

#define PROGNAME "outbox-relay status"
#define CELL_MAX 256 /* longest value shown in a table cell */

static void usage(FILE *out)
{
	fprintf(out, "Usage: outbox-relay status [OPTIONS]\n"
	             "Show the replication slot and the Redis streams of an outbox-relay deployment,\n"
	             "then exit.\n"
	             "\n"
	             "Options (each also as its environment variable; flags win). Every other\n"
	             "outbox-relay option is accepted too, and checked, so the relay's own flags and\n"
	             "environment can be reused as they are.\n");
	config_print_options(CONFIG_CMD_STATUS, out);
	fprintf(out, "\n"
	             "Exit status: 0 all good, 2 bad options, 3 PostgreSQL unreachable, 4 the slot\n"
	             "does not exist, 5 Redis unreachable (the first of these that applies).\n");
}

/* ---- Tables ---- */

struct table {
	size_t ncols;
	const char *const *head;
	unsigned right; /* bit i: column i is right-aligned (numbers) */
	char **cells;   /* nrows * ncols, each malloc'd */
	size_t nrows, cap;
	bool failed; /* an allocation failed; rows may be missing */
};

/* Append a row of t->ncols values (copied; NULL shows as "-"). */
static void table_add(struct table *t, const char *const *vals)
{
	if (t->failed)
		return;
	if (t->nrows == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 8;
		char **grown = realloc(t->cells, cap * t->ncols * sizeof(*grown));

		if (!grown) {
			t->failed = true;
			return;
		}
		t->cells = grown;
		t->cap = cap;
	}
	for (size_t i = 0; i < t->ncols; i++) {
		char *s = strdup(vals[i] ? vals[i] : "-");

		if (!s) {
			for (size_t j = 0; j < i; j++)
				free(t->cells[t->nrows * t->ncols + j]);
			t->failed = true;
			return;
		}
		t->cells[t->nrows * t->ncols + i] = s;
	}
	t->nrows++;
}

static void table_print(const struct table *t, FILE *out)
{
	size_t width[16] = {0};

	for (size_t i = 0; i < t->ncols && i < 16; i++) {
		width[i] = strlen(t->head[i]);
		for (size_t r = 0; r < t->nrows; r++) {
			size_t w = strlen(t->cells[r * t->ncols + i]);

			if (w > width[i])
				width[i] = w;
		}
	}
	for (size_t r = 0; r <= t->nrows; r++) {
		fputs("  ", out);
		for (size_t i = 0; i < t->ncols && i < 16; i++) {
			const char *s = r == 0 ? t->head[i] : t->cells[(r - 1) * t->ncols + i];
			bool last = i + 1 == t->ncols;

			if (t->right & (1u << i))
				fprintf(out, "%*s", (int)width[i], s);
			else if (last)
				fputs(s, out);
			else
				fprintf(out, "%-*s", (int)width[i], s);
			if (!last)
				fputs("  ", out);
		}
		fputc('\n', out);
	}
	if (t->failed)
		fputs("  (out of memory: rows are missing)\n", out);
}

static void table_finish(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

/* ---- PostgreSQL ---- */

/* msg on one line: newlines and tabs become spaces, trailing blanks go. */
static const char *one_line(const char *msg, char *buf, size_t len)
{
	size_t n = 0;

	for (const char *p = msg; *p && n + 1 < len; p++) {
		char ch = (*p == '\n' || *p == '\t' || *p == '\r') ? ' ' : *p;

		if (ch == ' ' && (n == 0 || buf[n - 1] == ' '))
			continue;
		buf[n++] = ch;
	}
	while (n > 0 && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
	return buf;
}

/* Columns newer servers add (pg_slot_col_since() says which version). */
static const struct {
	const char *name;
	enum pg_slot_col col;
	bool boolean;
} slot_columns[] = {
    {"conflicting", PGS_CONFLICTING, true},
    {"inactive_since", PGS_INACTIVE_SINCE, false},
    {"invalidation_reason", PGS_INVALIDATION_REASON, false},
    {"failover", PGS_FAILOVER, true},
    {"synced", PGS_SYNCED, true},
};

/* The slot as pg_section found it, for the gap check of the Redis section. */
struct slot_view {
	bool queried; /* pg_replication_slots was read */
	bool exists;
	bool invalidated; /* wal_status lost, or an invalidation_reason */
	lsn_t confirmed;
	char why[96];
};

static void kv(FILE *out, const char *key, const char *value)
{
	fprintf(out, "  %-21s%s\n", key, value ? value : "-");
}

static const char *pg_bool(const char *v)
{
	return !v ? NULL : strcmp(v, "t") == 0 ? "true" : "false";
}

/* The slot section. Returns EXIT_OK, EXIT_PG_SETUP or EXIT_SLOT; fills *view. */
static int pg_section(const struct relay_config *cf, FILE *out, struct slot_view *view)
{
	/* Defaults first; the expanded DSN overrides them; the password file wins. */
	const char *keys[5] = {"connect_timeout", "fallback_application_name", "dbname"};
	const char *vals[5] = {"10", "outbox-relay status", cf->pg_dsn};
	char msg[1024], line[512];
	struct pg_slot slot = {0};
	PGresult *failed;
	enum pg_fact fact;
	PGconn *conn;
	int rc = EXIT_OK, version;

	if (cf->pg_password) {
		keys[3] = "password";
		vals[3] = cf->pg_password;
	}
	conn = PQconnectdbParams(keys, vals, 1);
	if (!conn || PQstatus(conn) != CONNECTION_OK) {
		fprintf(out, "PostgreSQL\n  error: could not connect: %s\n",
		        conn ? one_line(PQerrorMessage(conn), msg, sizeof(msg)) : "out of memory");
		PQfinish(conn);
		return EXIT_PG_SETUP;
	}
	fprintf(out, "PostgreSQL: host=%s port=%s dbname=%s user=%s\n", PQhost(conn), PQport(conn),
	        PQdb(conn), PQuser(conn));

	version = PQserverVersion(conn);
	fact = pg_slot_read(conn, cf->slot, &slot, &failed);
	if (fact != PG_FACT_OK && fact != PG_FACT_ABSENT) {
		fprintf(out, "Replication slot \"%s\"\n  error: could not query pg_replication_slots: %s\n",
		        cf->slot,
		        fact == PG_FACT_NOMEM ? "out of memory"
		                              : one_line(PQerrorMessage(conn), msg, sizeof(msg)));
		PQclear(failed);
		rc = EXIT_PG_SETUP;
	} else if ((view->queried = true) && !slot.exists) {
		fprintf(out,
		        "Replication slot \"%s\"\n  error: the slot does not exist in this cluster "
		        "(the relay creates it on its first start unless --no-create-slot)\n",
		        cf->slot);
		rc = EXIT_SLOT;
	} else {
		const char *safe = pg_slot_cell(&slot, PGS_SAFE), *ws = pg_slot_cell(&slot, PGS_WAL_STATUS);
		bool lost = ws && strcmp(ws, "lost") == 0;

		fprintf(out, "Replication slot \"%s\"\n", cf->slot);
		kv(out, "slot_name", pg_slot_cell(&slot, PGS_NAME));
		kv(out, "plugin", pg_slot_cell(&slot, PGS_PLUGIN));
		kv(out, "slot_type", pg_slot_cell(&slot, PGS_TYPE));
		kv(out, "database", pg_slot_cell(&slot, PGS_DATABASE));
		kv(out, "temporary", pg_bool(pg_slot_cell(&slot, PGS_TEMPORARY)));
		kv(out, "active", pg_bool(pg_slot_cell(&slot, PGS_ACTIVE)));
		kv(out, "active_pid", pg_slot_cell(&slot, PGS_PID));
		kv(out, "confirmed_flush_lsn", pg_slot_cell(&slot, PGS_CONFIRMED));
		kv(out, "restart_lsn", pg_slot_cell(&slot, PGS_RESTART));
		if (pg_slot_cell(&slot, PGS_LAG)) {
			(void)snprintf(line, sizeof(line), "%s (%s behind the current WAL position)",
			               pg_slot_cell(&slot, PGS_LAG), pg_slot_cell(&slot, PGS_LAG_PRETTY));
			kv(out, "lag_bytes", line);
		} else {
			kv(out, "lag_bytes", NULL);
		}
		kv(out, "wal_status", ws);
		view->exists = true;
		view->confirmed = slot.confirmed;
		view->invalidated = slot.invalidated;
		if (slot.invalidated)
			(void)snprintf(view->why, sizeof(view->why), "%s", slot.why);
		for (size_t i = 0; i < sizeof(slot_columns) / sizeof(slot_columns[0]); i++) {
			const char *v = pg_slot_cell(&slot, slot_columns[i].col);

			if (version >= pg_slot_col_since(slot_columns[i].col))
				kv(out, slot_columns[i].name, slot_columns[i].boolean ? pg_bool(v) : v);
		}
		if (safe) {
			(void)snprintf(line, sizeof(line), "%s (%s)", safe,
			               pg_slot_cell(&slot, PGS_SAFE_PRETTY));
			kv(out, "safe_wal_size", line);
		} else {
			kv(out, "safe_wal_size", lost ? "-" : "- (no max_slot_wal_keep_size: unlimited)");
		}
		if (slot.invalidated) {
			fprintf(out,
			        "  error: the slot was invalidated (%s); the relay cannot stream from it\n",
			        slot.why);
			rc = EXIT_SLOT;
		}
	}
	pg_slot_free(&slot);
	PQfinish(conn);
	return rc;
}

/* ---- Redis ---- */

/* A scalar reply as text: integers in decimal, nil as "-". */
static const char *reply_text(const redisReply *r, char *buf, size_t len)
{
	if (!r)
		return "-";
	switch (r->type) {
	case REDIS_REPLY_INTEGER:
		(void)snprintf(buf, len, "%lld", r->integer);
		return buf;
	case REDIS_REPLY_STRING:
	case REDIS_REPLY_STATUS:
		(void)snprintf(buf, len, "%.*s", (int)(r->len < len ? r->len : len - 1), r->str);
		return buf;
	case REDIS_REPLY_NIL:
		return "-";
	default:
		return "?";
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Collect the stream keys matching pattern on every master (one server: on
 * it), sorted. False with err on failure.
 */
static bool scan_all(struct rclient *c, const char *pattern, struct rclient_keys *l, char *err,
                     size_t errlen)
{
	char why[900];

	switch (rclient_scan_streams(c, pattern, rclient_keys_add, l, why, sizeof(why))) {
	case RCLIENT_OK:
		break;
	case RCLIENT_REFUSED:
		(void)snprintf(err, errlen, "SCAN failed: %s", why);
		return false;
	case RCLIENT_ABORTED:
		(void)snprintf(err, errlen, "out of memory");
		return false;
	default:
		(void)snprintf(err, errlen, "%s", why);
		return false;
	}
	/* SCAN may return a key twice; sort, then drop repeats. */
	if (l->n > 1) {
		size_t kept = 1;

		qsort(l->keys, l->n, sizeof(*l->keys), cmp_str);
		for (size_t i = 1; i < l->n; i++) {
			if (strcmp(l->keys[i], l->keys[kept - 1]) == 0)
				free(l->keys[i]);
			else
				l->keys[kept++] = l->keys[i];
		}
		l->n = kept;
	}
	return true;
}

/*
 * The relay's watermark for stream key and the slot, as "LSN:index" (the
 * stored value is "<commit LSN, 16 hex digits>:<index in the transaction,
 * 8 hex digits> <system id>/<database>"; before 0.2 it had no owner and was
 * kept per hash tag); NULL when there is none. Other values are shown as
 * they are.
 */
static const char *watermark(struct rclient *c, const struct relay_config *cf, const char *key,
                             char *buf, size_t len, char *err, size_t errlen, bool *failed)
{
	struct buf tag = {0}, wm = {0};
	const char *shown = NULL;

	*failed = false;
	for (int legacy = 0; legacy < 2 && !shown; legacy++) {
		const char *argv[2] = {"GET", NULL};
		char why[600] = "out of memory";
		redisReply *r;

		buf_reset(&wm);
		if (!stream_key_base(&wm, cf->key_prefix, "wm", key, strlen(key), !legacy, &tag)) {
			shown = wm.failed || tag.failed ? NULL : "(no hash tag)";
			if (!shown) {
				(void)snprintf(err, errlen, "out of memory");
				*failed = true;
			}
			break;
		}
		buf_putc(&wm, ':');
		buf_puts(&wm, cf->slot);
		argv[1] = wm.data;
		r = wm.failed ? NULL : rclient_call(c, wm.data, 2, argv, why, sizeof(why));
		if (!r) {
			(void)snprintf(err, errlen, "GET failed: %s", why);
			*failed = true;
			break;
		}
		if (r->type == REDIS_REPLY_STRING) {
			unsigned long long pos;
			unsigned idx;
			int used = 0;
			char lsn[LSN_STRLEN];

			if (r->len >= 25 && sscanf(r->str, "%16llx:%8x%n", &pos, &idx, &used) == 2 &&
			    used == 25 && (r->len == 25 || r->str[25] == ' ')) {
				(void)snprintf(buf, len, "%s:%u", lsn_format((lsn_t)pos, lsn), idx);
			} else {
				(void)snprintf(buf, len, "%.*s", (int)(r->len < len ? r->len : len - 1), r->str);
			}
			shown = buf;
		} else if (r->type == REDIS_REPLY_ERROR) {
			(void)snprintf(buf, len, "(error: %s)", r->str);
			shown = buf;
		}
		freeReplyObject(r);
	}
	buf_finish(&tag);
	buf_finish(&wm);
	return shown;
}

static const char *const stream_head[] = {"STREAM",        "LENGTH", "LAST-GENERATED-ID",
                                          "ENTRIES-ADDED", "GROUPS", "WATERMARK"};
static const char *const group_head[] = {
    "STREAM", "GROUP", "CONSUMERS", "PENDING", "LAG", "LAST-DELIVERED-ID", "OLDEST-PENDING-AGE"};

/*
 * The age of group's oldest pending entry on stream key, as "12.3s" into
 * buf ("-" when none is pending; consumer_metrics_oldest_pending_ms() reads
 * it, as outbox-consume's gauge does). now is the server's TIME reply.
 * NULL with err when the connection failed.
 */
static const char *pending_age(struct rclient *c, const char *key, const redisReply *group,
                               const redisReply *now, char *buf, size_t len, char *err,
                               size_t errlen)
{
	const char *argv[3] = {"XPENDING", key, NULL};
	char why[600];
	redisReply *r;
	uint64_t pending;
	int64_t age;

	if (!group || group->type != REDIS_REPLY_STRING || !now)
		return "?";
	argv[2] = group->str;
	r = rclient_call(c, key, 3, argv, why, sizeof(why));
	if (!r) {
		(void)snprintf(err, errlen, "XPENDING failed: %s", why);
		return NULL;
	}
	age = consumer_metrics_oldest_pending_ms(r, now, &pending);
	freeReplyObject(r);
	if (age == -1)
		return "-";
	if (age < 0)
		return "?";
	(void)snprintf(buf, len, "%" PRId64 ".%01" PRId64 "s", age / 1000, age % 1000 / 100);
	return buf;
}

/*
 * One stream: a row in streams, a row per group in groups. Returns false
 * with err when the connection failed; a stream deleted meanwhile is skipped.
 */
static bool describe_stream(struct rclient *c, const struct relay_config *cf, const char *key,
                            struct table *streams, struct table *groups, char *err, size_t errlen)
{
	const char *info_argv[3] = {"XINFO", "STREAM", key};
	const char *groups_argv[3] = {"XINFO", "GROUPS", key};
	char len_s[32], last_s[CELL_MAX], added_s[32], ngroups_s[32], wm_s[CELL_MAX], why[600];
	redisReply *info, *gr;
	const char *wm;
	bool failed;

	info = rclient_call(c, key, 3, info_argv, why, sizeof(why));
	if (!info) {
		(void)snprintf(err, errlen, "XINFO STREAM failed: %s", why);
		return false;
	}
	if (info->type == REDIS_REPLY_ERROR) {
		bool gone = strstr(info->str, "no such key") != NULL;

		if (!gone) {
			const char *row[6] = {key, "?", "?", "?", "?", NULL};

			(void)snprintf(wm_s, sizeof(wm_s), "(error: %s)", info->str);
			row[5] = wm_s;
			table_add(streams, row);
		}
		freeReplyObject(info);
		return true;
	}
	gr = rclient_call(c, key, 3, groups_argv, why, sizeof(why));
	if (!gr) {
		freeReplyObject(info);
		(void)snprintf(err, errlen, "XINFO GROUPS failed: %s", why);
		return false;
	}
	wm = watermark(c, cf, key, wm_s, sizeof(wm_s), err, errlen, &failed);
	if (failed) {
		freeReplyObject(info);
		freeReplyObject(gr);
		return false;
	}
	{
		const char *row[6] = {
		    key,
		    reply_text(rclient_map_get(info, "length"), len_s, sizeof(len_s)),
		    reply_text(rclient_map_get(info, "last-generated-id"), last_s, sizeof(last_s)),
		    /* entries-added is new in Redis 7.0 */
		    reply_text(rclient_map_get(info, "entries-added"), added_s, sizeof(added_s)),
		    reply_text(rclient_map_get(info, "groups"), ngroups_s, sizeof(ngroups_s)),
		    wm,
		};

		table_add(streams, row);
	}
	if (gr->type == REDIS_REPLY_ARRAY && gr->elements > 0) {
		const char *time_argv[1] = {"TIME"};
		/* The clock of the server holding the stream, which its entry ids come from. */
		redisReply *now = rclient_call(c, key, 1, time_argv, why, sizeof(why));

		if (!now) {
			freeReplyObject(info);
			freeReplyObject(gr);
			(void)snprintf(err, errlen, "TIME failed: %s", why);
			return false;
		}
		for (size_t i = 0; i < gr->elements; i++) {
			const redisReply *g = gr->element[i];
			char name_s[CELL_MAX], cons_s[32], pend_s[32], lag_s[32], ld_s[CELL_MAX], age_s[32];
			const char *age = pending_age(c, key, rclient_map_get(g, "name"), now, age_s,
			                              sizeof(age_s), err, errlen);

			if (!age) {
				freeReplyObject(now);
				freeReplyObject(info);
				freeReplyObject(gr);
				return false;
			}
			/* lag is nil in Redis 7.0 when it cannot be computed (e.g. after
			 * deletions); absent before 7.0: both show "-". */
			const char *row[7] = {
			    key,
			    reply_text(rclient_map_get(g, "name"), name_s, sizeof(name_s)),
			    reply_text(rclient_map_get(g, "consumers"), cons_s, sizeof(cons_s)),
			    reply_text(rclient_map_get(g, "pending"), pend_s, sizeof(pend_s)),
			    reply_text(rclient_map_get(g, "lag"), lag_s, sizeof(lag_s)),
			    reply_text(rclient_map_get(g, "last-delivered-id"), ld_s, sizeof(ld_s)),
			    age,
			};

			table_add(groups, row);
		}
		freeReplyObject(now);
	}
	freeReplyObject(info);
	freeReplyObject(gr);
	return true;
}

/*
 * The slot record (sink_redis.h) and what it says of the slot pg_section
 * found. Returns EXIT_SLOT_GAP when a gap is suspected, EXIT_REDIS_SETUP when
 * the record could not be read, else EXIT_OK.
 */
static int record_section(struct rclient *c, const struct relay_config *cf,
                          const struct slot_view *view, FILE *out)
{
	const char *argv[2] = {"GET", NULL};
	char key[300], a[LSN_STRLEN], b[LSN_STRLEN], when[64] = "an unknown time", why[600];
	struct slot_record rec;
	struct slot_seen seen = {view->exists, view->invalidated, view->why, view->confirmed, false};
	struct buf kb = {0};
	redisReply *r;
	int rc = EXIT_OK;

	slot_record_key(&kb, cf->key_prefix, cf->slot);
	(void)snprintf(key, sizeof(key), "%s", kb.failed ? "" : kb.data);
	buf_finish(&kb);
	argv[1] = key;
	r = rclient_call(c, key, 2, argv, why, sizeof(why));
	fprintf(out, "Slot record (%s):\n", key);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		fprintf(out, "  error: GET failed: %s\n", r ? r->str : why);
		freeReplyObject(r);
		return EXIT_REDIS_SETUP;
	}
	if (r->type != REDIS_REPLY_STRING) {
		fprintf(out, "  none: the relay has confirmed nothing for this slot through this Redis "
		             "(a new deployment starts the slot afresh)\n");
		freeReplyObject(r);
		return EXIT_OK;
	}
	if (!slot_record_parse(r->str, r->len, &rec)) {
		fprintf(out, "  error: the key does not hold a slot record of outbox-relay\n");
		freeReplyObject(r);
		return EXIT_REDIS_STATE;
	}
	freeReplyObject(r);
	(void)time_format_iso(rec.commit_us, when, sizeof(when));
	kv(out, "confirmed", lsn_format(rec.confirmed, a));
	if (rec.commit_lsn) {
		char line[128];

		(void)snprintf(line, sizeof(line), "%s (committed %s)", lsn_format(rec.commit_lsn, b),
		               when);
		kv(out, "last_commit", line);
	} else {
		kv(out, "last_commit", NULL);
	}
	if (rec.tli) {
		char tli[16];

		(void)snprintf(tli, sizeof(tli), "%u", (unsigned)rec.tli);
		kv(out, "timeline", tli);
	}
	kv(out, "owner", rec.owner);
	if (!view->queried) {
		fprintf(out, "  gap check: not made (the slot could not be read)\n");
	} else if (slot_record_judge(&rec, &seen) != SLOT_SAME) {
		if (!view->exists)
			fprintf(out,
			        "  error: gap suspected: the slot does not exist, but the relay "
			        "confirmed it up to %s",
			        a);
		else if (view->invalidated)
			fprintf(out, "  error: gap suspected: the slot was invalidated (%s)", view->why);
		else
			fprintf(out,
			        "  error: gap suspected: the slot stands at %s, past %s, the last "
			        "position the relay confirmed (recreated, or advanced by something "
			        "else)",
			        lsn_format(view->confirmed, b), a);
		fprintf(out,
		        "; events committed after %s may be missing: the relay refuses to start "
		        "(exit 8); see README, \"Gaps\"\n",
		        when);
		rc = EXIT_SLOT_GAP;
	} else {
		fprintf(out, "  gap check: ok (the slot is at or behind the record)\n");
	}
	return rc;
}

/* The streams section. Returns EXIT_OK, EXIT_REDIS_SETUP, or the record's verdict. */
static int redis_section(const struct relay_config *cf, const char *pattern,
                         const struct slot_view *view, FILE *out)
{
	struct table streams = {.ncols = 6, .head = stream_head, .right = 0x1a};
	struct table groups = {.ncols = 7, .head = group_head, .right = 0x5c};
	struct rclient_keys keys = {0};
	char desc[300], err[1024];
	struct rclient *c;
	bool permanent;
	int rc = EXIT_OK, rec_rc = EXIT_OK;

	(void)redis_target_describe(&cf->redis, desc, sizeof(desc));
	fprintf(out, "\nRedis: %s\n", desc);
	c = rclient_create(&cf->redis, cf->redis_timeout_ms);
	if (!c) {
		fprintf(out, "  error: out of memory\n");
		return EXIT_REDIS_SETUP;
	}
	if (!rclient_connect(c, &permanent, err, sizeof(err))) {
		fprintf(out, "  error: %s\n", err);
		rclient_destroy(c);
		return EXIT_REDIS_SETUP;
	}
	if (rclient_is_cluster(c))
		fprintf(out, "  cluster: %d masters\n", rclient_nmasters(c));
	rec_rc = record_section(c, cf, view, out);
	if (!scan_all(c, pattern, &keys, err, sizeof(err))) {
		fprintf(out, "  error: %s\n", err);
		rc = EXIT_REDIS_SETUP;
		goto out;
	}
	for (size_t i = 0; i < keys.n; i++) {
		if (!describe_stream(c, cf, keys.keys[i], &streams, &groups, err, sizeof(err))) {
			rc = EXIT_REDIS_SETUP;
			break;
		}
	}
	fprintf(out, "Streams matching \"%s\": %zu\n", pattern, keys.n);
	if (streams.nrows > 0) {
		table_print(&streams, out);
		fprintf(out,
		        "  (WATERMARK: commit LSN:index of the last event slot \"%s\" published "
		        "to the stream, from %s:wm:{STREAM}:%s)\n",
		        cf->slot, cf->key_prefix, cf->slot);
	}
	if (groups.nrows > 0) {
		fprintf(out, "Consumer groups:\n");
		table_print(&groups, out);
	} else if (streams.nrows > 0) {
		fprintf(out, "Consumer groups: none\n");
	}
	if (rc != EXIT_OK)
		fprintf(out, "  error: %s\n", err);
out:
	table_finish(&streams);
	table_finish(&groups);
	rclient_keys_free(&keys);
	rclient_destroy(c);
	return rc != EXIT_OK ? rc : rec_rc;
}

/* See status.h. */
int status_main(int argc, char **argv, char **envp)
{
	struct relay_config cf;
	char err[1024];
	int rc_pg, rc_redis;
	struct slot_view view = {0};

	switch (config_load_as(&cf, CONFIG_CMD_STATUS, PROGNAME, usage, argc, argv, envp, err,
	                       sizeof(err))) {
	case CONFIG_OK:
		break;
	case CONFIG_HELP:
	case CONFIG_VERSION:
		return EXIT_OK;
	case CONFIG_ERROR:
	default:
		fprintf(stderr, "%s: %s\n", PROGNAME, err);
		return EXIT_USAGE;
	}
	rc_pg = pg_section(&cf, stdout, &view);
	rc_redis = redis_section(&cf, cf.stream_pattern, &view, stdout);
	(void)fflush(stdout);
	config_finish(&cf);
	/* A suspected gap outranks "the slot does not exist": it says why. */
	return rc_redis == EXIT_SLOT_GAP || rc_pg == EXIT_OK ? rc_redis : rc_pg;
}
