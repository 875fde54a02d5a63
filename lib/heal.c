/*
 * heal.c - `outbox-relay heal`: close the gap the relay refused to stream
 * over (exit 8), with no window while the application goes on writing.
 *
 * The order is what makes it exact. When the slot is missing (or
 * invalidated), heal creates it on a replication connection with an
 * exported snapshot (CREATE_REPLICATION_SLOT ... SNAPSHOT 'export') and
 * keeps that connection open and idle; it republishes the rows since the
 * slot record's last commit (less a margin: a row's created_at is its
 * transaction's start) inside that snapshot, so it publishes exactly what
 * was committed before the slot's consistent point, and the slot streams
 * exactly what was committed after it. Only once Redis acknowledged every
 * republished row does it move the slot record to the consistent point:
 * interrupted before that, the next start still refuses, and heal can be run
 * again. When the slot exists but stands past the record (recreated or
 * advanced by someone), the rows since the record are republished up to now
 * and the record moves to the slot's position: what the slot streams again
 * from there is dropped by dedup if the relay starts within --dedup-window.
 *
 * A server whose history does not hold what Redis has (a standby that was
 * behind, promoted; a copy restored: slot_history_diverged()) is healed the
 * same way, and more: its new commits take positions the streams'
 * watermarks already passed, so heal deletes this slot's watermarks at or
 * past the slot's position before it moves the record (the events already in
 * the streams stay; the rows the server has again are dropped by dedup). The
 * same holds whenever heal creates the slot: a watermark at or past a new
 * slot's consistent point can only come from another history.
 */
#include "heal.h"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "exitcode.h"
#include "log.h"
#include "lsn.h"
#include "pg_facts.h"
#include "pg_sql.h"
#include "pgrepl.h"
#include "rclient.h"
#include "republish.h"
#include "sink_redis.h"
#include "slot_record.h"

/* How long heal waits for a slot in use to be released before it refuses. */
#define HEAL_ACTIVE_WAIT_MS 10000

struct heal {
	const struct relay_config *cf;
	PGconn *repl;                         /* replication=database: IDENTIFY_SYSTEM, the slot */
	char system_id[PGREPL_SYSTEM_ID_LEN]; /* IDENTIFY_SYSTEM's */
	char dbname[PGREPL_DBNAME_LEN];
	struct slot_history hist; /* its timeline and WAL end, and TIMELINE_HISTORY */
	struct {
		bool exists, invalidated, active;
		lsn_t confirmed;
		char why[96];    /* "wal_status lost", "invalidation_reason ..." */
		char plugin[16]; /* an existing slot's; else --plugin: what a new one is made with */
	} slot;
	char err[1024];
};

/* Run sql on the replication connection; NULL with h->err unless it returns want. */
static PGresult *run(struct heal *h, const char *what, const char *sql, ExecStatusType want)
{
	return pg_sql_run(h->repl, what, sql, want, h->err, sizeof(h->err));
}

/* A replication connection like the relay's, and IDENTIFY_SYSTEM. */
static int repl_connect(struct heal *h)
{
	const char *keys[6] = {"connect_timeout", "fallback_application_name", "dbname", "replication"};
	const char *vals[6] = {"10", "outbox-relay heal", h->cf->pg_dsn, "database"};
	PGresult *res;

	if (h->cf->pg_password) {
		keys[4] = "password";
		vals[4] = h->cf->pg_password;
	}
	h->repl = PQconnectdbParams(keys, vals, 1);
	if (!h->repl || PQstatus(h->repl) != CONNECTION_OK) {
		if (h->repl)
			pg_sql_error(h->repl, "could not connect to PostgreSQL (replication): ", h->err,
			             sizeof(h->err));
		else
			snprintf(h->err, sizeof(h->err), "out of memory");
		return EXIT_PG_SETUP;
	}
	res = run(h, "IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM", PGRES_TUPLES_OK);
	if (!res)
		return EXIT_PG_SETUP;
	if (!pgrepl_identity(res, h->system_id, h->dbname, &h->hist)) {
		PQclear(res);
		snprintf(h->err, sizeof(h->err), "IDENTIFY_SYSTEM: no database in its answer");
		return EXIT_PG_SETUP;
	}
	PQclear(res);
	if (!pgrepl_read_history(h->repl, h->hist.tli, &h->hist, h->err, sizeof(h->err)))
		return EXIT_PG_SETUP;
	return EXIT_OK;
}

/* b = glob pattern matching s literally (SCAN's MATCH). */
static void glob_quote(struct buf *b, const char *s)
{
	for (; *s; s++) {
		if (strchr("*?[]\\", *s))
			buf_putc(b, '\\');
		buf_putc(b, *s);
	}
}

/*
 * Delete this slot's stream watermarks (<prefix>:wm:*:<slot>, per stream and
 * the legacy per tag) whose commit position is at or past at: on every
 * master. *n counts them. EXIT_OK, or an exit code with h->err.
 */
static int lower_watermarks(struct heal *h, lsn_t at, size_t *n)
{
	const struct relay_config *cf = h->cf;
	struct rclient *c = rclient_create(&cf->redis, cf->redis_timeout_ms);
	struct rclient_keys keys = {0};
	struct buf pat = {0};
	char why[900], a[LSN_STRLEN];
	bool permanent;
	int rc = EXIT_OK;

	*n = 0;
	glob_quote(&pat, cf->key_prefix);
	buf_puts(&pat, ":wm:*:");
	glob_quote(&pat, cf->slot);
	if (!c || pat.failed) {
		snprintf(h->err, sizeof(h->err), "out of memory");
		rc = EXIT_FAILURE_RUNTIME;
		goto out;
	}
	if (!rclient_connect(c, &permanent, why, sizeof(why))) {
		snprintf(h->err, sizeof(h->err), "lowering the watermarks: %s", why);
		rc = EXIT_REDIS_SETUP;
		goto out;
	}
	switch (rclient_scan_keys(c, pat.data, "string", rclient_keys_add, &keys, why, sizeof(why))) {
	case RCLIENT_OK:
		break;
	case RCLIENT_ABORTED:
		snprintf(h->err, sizeof(h->err), "out of memory");
		rc = EXIT_FAILURE_RUNTIME;
		goto out;
	default:
		snprintf(h->err, sizeof(h->err),
		         "lowering the watermarks: SCAN MATCH %s failed: %s (the relay's Redis user needs "
		         "+scan and +del: deploy/redis/users.acl)",
		         pat.data, why);
		rc = EXIT_REDIS_SETUP;
		goto out;
	}
	for (size_t i = 0; i < keys.n && rc == EXIT_OK; i++) {
		const char *get[2] = {"GET", keys.keys[i]}, *del[2] = {"DEL", keys.keys[i]};
		redisReply *r = rclient_call(c, keys.keys[i], 2, get, why, sizeof(why));
		unsigned long long pos;
		unsigned idx;
		int used = 0;

		if (!r || r->type == REDIS_REPLY_ERROR) {
			snprintf(h->err, sizeof(h->err), "lowering the watermarks: GET %s: %s", keys.keys[i],
			         r ? r->str : why);
			rc = EXIT_REDIS_SETUP;
		} else if (r->type != REDIS_REPLY_STRING || r->len < 25 ||
		           sscanf(r->str, "%16llx:%8x%n", &pos, &idx, &used) != 2 || used != 25) {
			log_warn("%s holds no watermark (\"%.*s\"): left as it is", keys.keys[i],
			         r->type == REDIS_REPLY_STRING ? (int)(r->len < 60 ? r->len : 60) : 0,
			         r->type == REDIS_REPLY_STRING ? r->str : "");
		} else if ((lsn_t)pos >= at) {
			freeReplyObject(r);
			r = rclient_call(c, keys.keys[i], 2, del, why, sizeof(why));
			if (!r || r->type == REDIS_REPLY_ERROR) {
				snprintf(h->err, sizeof(h->err),
				         "lowering the watermarks: DEL %s: %s (the relay's Redis user needs "
				         "+del: deploy/redis/users.acl)",
				         keys.keys[i], r ? r->str : why);
				rc = EXIT_REDIS_SETUP;
			} else {
				log_info("deleted watermark %s (commit %s, at or past the slot's %s)", keys.keys[i],
				         lsn_format((lsn_t)pos, why), lsn_format(at, a));
				(*n)++;
			}
		}
		if (r)
			freeReplyObject(r);
	}
out:
	rclient_keys_free(&keys);
	buf_finish(&pat);
	if (c)
		rclient_destroy(c);
	return rc;
}

/* The slot as pg_replication_slots has it now (h->slot). */
static int read_slot(struct heal *h)
{
	struct pg_slot slot;
	PGresult *failed;
	enum pg_fact fact;

	memset(&h->slot, 0, sizeof(h->slot));
	snprintf(h->slot.plugin, sizeof(h->slot.plugin), "%s", h->cf->plugin);
	fact = pg_slot_read(h->repl, h->cf->slot, &slot, &failed);
	if (fact != PG_FACT_OK && fact != PG_FACT_ABSENT) {
		if (fact == PG_FACT_NOMEM)
			snprintf(h->err, sizeof(h->err), "reading the slot: out of memory");
		else
			pg_sql_error(h->repl, "reading the slot: ", h->err, sizeof(h->err));
		PQclear(failed);
		return EXIT_PG_SETUP;
	}
	if (slot.exists) {
		if (!slot.ours) {
			snprintf(h->err, sizeof(h->err),
			         "replication slot \"%s\" exists but its plugin is \"%s\", not wal2json or "
			         "pgoutput: use another --slot or drop it",
			         h->cf->slot, slot.plugin);
			pg_slot_free(&slot);
			return EXIT_SLOT;
		}
		/* An invalidated slot is made again with its own plugin. */
		snprintf(h->slot.plugin, sizeof(h->slot.plugin), "%.15s", slot.plugin);
		h->slot.exists = true;
		h->slot.confirmed = slot.confirmed;
		h->slot.active = slot.active;
		snprintf(h->slot.why, sizeof(h->slot.why), "%s", slot.why);
		h->slot.invalidated = slot.invalidated;
	}
	pg_slot_free(&slot);
	return EXIT_OK;
}

/*
 * Drop an invalidated slot, create it with an exported snapshot: *at its
 * consistent point, snapshot its name (valid while h->repl stays open and
 * idle).
 */
static int create_slot(struct heal *h, lsn_t *at, char *snapshot, size_t snaplen)
{
	struct buf q = {0};
	PGresult *res;

	if (h->slot.exists) { /* invalidated: it can never stream again */
		buf_puts(&q, "DROP_REPLICATION_SLOT \"");
		buf_puts(&q, h->cf->slot);
		buf_puts(&q, "\"");
		res = q.failed ? NULL : run(h, "dropping the invalidated slot", q.data, PGRES_COMMAND_OK);
		buf_finish(&q);
		if (!res)
			return EXIT_SLOT;
		PQclear(res);
	}
	buf_puts(&q, "CREATE_REPLICATION_SLOT \"");
	buf_puts(&q, h->cf->slot);
	buf_puts(&q, "\" LOGICAL ");
	buf_puts(&q, h->slot.plugin);
	buf_puts(&q, " (SNAPSHOT 'export'");
	if (h->cf->failover_slot && PQserverVersion(h->repl) >= 170000)
		buf_puts(&q, ", FAILOVER");
	buf_puts(&q, ")");
	res = q.failed ? NULL : run(h, "creating the slot", q.data, PGRES_TUPLES_OK);
	buf_finish(&q);
	if (!res)
		return EXIT_SLOT;
	if (PQntuples(res) != 1 || PQnfields(res) < 3 || PQgetisnull(res, 0, 2) ||
	    !lsn_parse(PQgetvalue(res, 0, 1), strlen(PQgetvalue(res, 0, 1)), at)) {
		PQclear(res);
		snprintf(h->err, sizeof(h->err), "CREATE_REPLICATION_SLOT: no snapshot in its answer");
		return EXIT_SLOT;
	}
	snprintf(snapshot, snaplen, "%s", PQgetvalue(res, 0, 2));
	PQclear(res);
	return EXIT_OK;
}

/* See heal.h. */
void heal_usage(FILE *out)
{
	fprintf(out,
	        "Usage: outbox-relay heal [OPTIONS]\n"
	        "Close the gap the relay refused with exit 8, while the application goes on\n"
	        "writing: create the slot (with an exported snapshot), republish the rows committed\n"
	        "before it from the outbox table inside that snapshot, move the slot record to the\n"
	        "slot's position; then start the relay as usual. It takes the relay's options and\n"
	        "variables; --since (default: %d minutes before the record's last commit), --until\n"
	        "is not taken, --time-column and --fetch-size as for republish (README, \"Gaps\").\n",
	        HEAL_MARGIN_S / 60);
	config_print_options(CONFIG_CMD_REPUBLISH, out);
}

/*
 * Republish since, delete the watermarks at or past at when lower (the
 * server's history diverged, or the slot is new), then move the record;
 * print the outcome.
 */
static int republish_and_record(struct heal *h, struct republish *rp, const char *since,
                                const char *snapshot, lsn_t at, int64_t at_us, bool lower)
{
	char a[LSN_STRLEN];
	size_t lowered = 0;
	int rc = republish_rows(rp, since, snapshot);

	h->err[0] = '\0'; /* set by lower_watermarks() only; else republish_errmsg() */
	if (rc == EXIT_OK && lower)
		rc = lower_watermarks(h, at, &lowered);
	if (rc == EXIT_OK)
		rc = republish_write_record(rp, h->system_id, h->dbname, h->hist.tli, at, at, at_us);
	printf("heal %s: ", rc == EXIT_OK ? "done" : "failed");
	republish_print_counts(rp, stdout);
	printf(" since=%s slot_record=%s watermarks_deleted=%zu\n", since, lsn_format(at, a), lowered);
	return rc;
}

static int heal_run(struct heal *h, struct republish *rp)
{
	const struct relay_config *cf = h->cf;
	const struct slot_record *r;
	struct slot_record rec;
	struct slot_seen seen;
	enum slot_verdict verdict;
	char since[64], a[LSN_STRLEN], b[LSN_STRLEN], snapshot[128], why[400];
	const char *from, *diverged;
	lsn_t at;
	int64_t at_us;
	int rc;

	rc = republish_connect(rp);
	if (rc != EXIT_OK) {
		snprintf(h->err, sizeof(h->err), "%s", republish_errmsg(rp));
		return rc;
	}
	r = republish_record(rp);
	if (!r) {
		printf("heal: no gap: Redis holds no slot record (%s:slot:%s): a new deployment, whose "
		       "first start creates the slot; nothing done\n",
		       cf->key_prefix, cf->slot);
		return EXIT_OK;
	}
	rec = *r;
	rc = repl_connect(h);
	if (rc != EXIT_OK)
		return rc;
	if (!slot_record_owner_is(&rec, h->system_id, h->dbname)) {
		snprintf(h->err, sizeof(h->err),
		         "Redis holds the record of a slot \"%s\" that belongs to database %s, not "
		         "to this one (%s/%s): give this relay its own --key-prefix or --slot",
		         cf->slot, rec.owner, h->system_id, h->dbname);
		return EXIT_REDIS_STATE;
	}
	/* The relay's own rule, on the record alone (heal runs in a process of its own). */
	diverged = slot_history_diverged(&rec, rec.commit_lsn, &h->hist, why, sizeof(why));
	if (diverged)
		log_info("PostgreSQL %s: the slot's watermarks at or past its position are deleted",
		         diverged);
	rc = read_slot(h);
	if (rc != EXIT_OK)
		return rc;
	seen = (struct slot_seen){.exists = h->slot.exists,
	                          .invalidated = h->slot.invalidated,
	                          .invalid_why = h->slot.why,
	                          .confirmed = h->slot.confirmed};
	verdict = slot_record_judge(&rec, &seen); /* the relay's own refusal rule */
	if (verdict == SLOT_SAME && !diverged) {
		printf("heal: no gap: slot \"%s\" stands at %s, at or behind the record's %s; start the "
		       "relay as usual\n",
		       cf->slot, lsn_format(h->slot.confirmed, a), lsn_format(rec.confirmed, b));
		return EXIT_OK;
	}
	/* A walsender whose relay was just killed holds the slot for a moment. */
	for (int i = 0; h->slot.active && i < HEAL_ACTIVE_WAIT_MS / 250; i++) {
		if (i == 0)
			log_info("slot \"%s\" is in use by another process: waiting up to %d s for it to "
			         "be released",
			         cf->slot, HEAL_ACTIVE_WAIT_MS / 1000);
		(void)poll(NULL, 0, 250);
		rc = read_slot(h);
		if (rc != EXIT_OK)
			return rc;
		seen.exists = h->slot.exists;
		seen.invalidated = h->slot.invalidated;
		seen.confirmed = h->slot.confirmed;
		verdict = slot_record_judge(&rec, &seen);
		if (verdict == SLOT_SAME && !diverged) {
			printf("heal: no gap: slot \"%s\" stands at %s, at or behind the record's %s\n",
			       cf->slot, lsn_format(h->slot.confirmed, a), lsn_format(rec.confirmed, b));
			return EXIT_OK;
		}
	}
	if (h->slot.active) {
		snprintf(h->err, sizeof(h->err),
		         "replication slot \"%s\" is in use by another process: stop what streams from "
		         "it (a relay started with --accept-gap?) and run heal again",
		         cf->slot);
		return EXIT_SLOT;
	}
	from = cf->since ? cf->since : slot_record_heal_since(&rec, since, sizeof(since));
	if (!from) {
		snprintf(h->err, sizeof(h->err),
		         "the slot record holds no commit time: give --since, the time of the last "
		         "event in the streams or earlier");
		return EXIT_USAGE;
	}
	if (verdict == SLOT_MISSING || verdict == SLOT_INVALIDATED) {
		if (h->slot.exists)
			log_info("slot \"%s\" was invalidated (%s): dropping it and creating it again",
			         cf->slot, h->slot.why);
		rc = create_slot(h, &at, snapshot, sizeof(snapshot));
		if (rc != EXIT_OK)
			return rc;
		at_us = time_now_us(); /* every commit before the consistent point is older */
		log_info("created slot \"%s\" at %s; republishing the rows committed before it "
		         "(since %s) inside its snapshot %s",
		         cf->slot, lsn_format(at, a), from, snapshot);
		rc = republish_and_record(h, rp, from, snapshot, at, at_us, true);
	} else {
		at = h->slot.confirmed;
		at_us = time_now_us(); /* the republish's snapshot is taken after this */
		log_info("slot \"%s\" stands at %s, %s the record's %s: republishing the rows since "
		         "%s up to now",
		         cf->slot, lsn_format(at, a), verdict == SLOT_PAST ? "past" : "at or behind",
		         lsn_format(rec.confirmed, b), from);
		rc = republish_and_record(h, rp, from, NULL, at, at_us, diverged != NULL);
		if (rc == EXIT_OK)
			printf("heal: the slot stood %s the record: rows committed after %s were "
			       "republished now and the slot streams them again; the relay drops them as "
			       "duplicates by dedup if it starts within --dedup-window (%llds)\n",
			       verdict == SLOT_PAST ? "past" : "behind", a, (long long)cf->dedup_window_s);
	}
	if (rc != EXIT_OK) {
		if (!h->err[0])
			snprintf(h->err, sizeof(h->err), "%s", republish_errmsg(rp));
		return rc;
	}
	printf("heal: slot \"%s\" at %s and its record agree: start the relay as usual (no "
	       "--accept-gap)\n",
	       cf->slot, a);
	return EXIT_OK;
}

/* See heal.h. */
int heal_main(const struct relay_config *cf)
{
	struct heal h = {.cf = cf};
	struct republish *rp;
	int rc;

	if (cf->until) {
		fprintf(stderr, "outbox-relay heal: --until is not taken: heal republishes up to the "
		                "slot's position\n");
		return EXIT_USAGE;
	}
	if (cf->dedup_window_s == 0) {
		fprintf(stderr, "outbox-relay heal: --dedup-window 0 would publish again what the "
		                "stream published: give the relay's --dedup-window (default 1h)\n");
		return EXIT_USAGE;
	}
	rp = republish_create(cf);
	if (!rp) {
		fprintf(stderr, "outbox-relay heal: out of memory\n");
		return EXIT_FAILURE_RUNTIME;
	}
	republish_signals();
	log_set_context("slot", cf->slot);
	rc = heal_run(&h, rp);
	if (rc != EXIT_OK && !(rc == EXIT_FAILURE_RUNTIME && republish_interrupted()))
		log_error("%s", h.err);
	if (rc != EXIT_OK)
		printf("heal failed: nothing moved the slot record; run it again once fixed\n");
	(void)fflush(stdout);
	republish_destroy(rp); /* the snapshot's transaction first, then its exporter */
	PQfinish(h.repl);
	return rc;
}
