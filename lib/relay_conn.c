/*
 * relay_conn.c - the relay's two servers: connecting with backoff, losing a
 * connection (what is retried, what ends the run), and at every start the
 * slot judged against the slot record in Redis (the gap check).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exitcode.h"
#include "slot_record.h"
#include "log.h"
#include "relay_int.h"

void relay_pg_lost(struct relay *r, const char *why)
{
	int64_t delay = backoff_next(&r->pg_bo, r->cf->retry_max_ms);

	if (!r->pg_down)
		log_warn("PostgreSQL: %s; reconnecting with backoff (next try in %lld ms)", why,
		         (long long)delay);
	else
		log_debug("PostgreSQL: %s; next try in %lld ms", why, (long long)delay);
	r->pg_down = true;
	r->in_txn = false; /* a partial transaction is sent again in full */
	r->spooling = r->replaying = false;
	sink_redis_held(r->sink, 0);
	relay_pgo_streams_reset(r);
	pgrepl_close(r->pg);
}

void relay_redis_lost(struct relay *r, const char *why)
{
	int64_t delay = backoff_next(&r->redis_bo, r->cf->retry_max_ms);

	relay_count(&r->m->redis_errors[sink_redis_errkind(r->sink)]);
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
	/* A record write still unacknowledged is not sent again: the server
	 * after a failover may lack events the old one acknowledged, and the
	 * write would claim them (and land even behind calls it refuses as
	 * OUTBOX_BEHIND). A new one waits until the resent calls went through
	 * (relay_queue_record). */
	if (r->cfm.rec_seq) {
		sink_redis_void_record(r->sink, r->cfm.rec_seq);
		confirm_record_cancel(&r->cfm);
	}
}

/* The commit time of the slot record, or words saying it is unknown. */
static const char *relay_format_us(int64_t us, char *buf, size_t len)
{
	const char *t = time_format_iso(us, buf, len);

	return t ? t : "an unknown time";
}

/*
 * One line for a slot that is not the one this relay streamed (pgrepl's
 * message says which way): what Redis has, what may be missing, and the way
 * forward: `outbox-relay heal`, safe while the application writes. The
 * manual steps it replaces come last (the republish --since has heal's
 * margin), for a stopped application only. Returns the exit code.
 */
static int gap_refuse(struct relay *r)
{
	char conf[LSN_STRLEN], commit[LSN_STRLEN], when[64], since[64];

	if (pgrepl_diverged(r->pg)) {
		log_error("%s; its new commits may take positions the streams' watermarks already "
		          "passed, and would be dropped as replays. Heal it with: outbox-relay heal "
		          "(with this relay's options; it deletes this slot's watermarks at or past the "
		          "slot's position, republishes the rows committed since the slot record's last "
		          "commit and moves the record; README, \"PostgreSQL high availability\"), then "
		          "start the relay as usual (--accept-gap does not apply)",
		          pgrepl_errmsg(r->pg));
		return EXIT_SLOT_GAP;
	}
	log_error("%s; the slot record in Redis (%s:slot:%s) says this relay confirmed up to %s "
	          "and published events up to the commit at %s (committed %s): events committed "
	          "after that may be missing from the streams. Heal it with: outbox-relay heal "
	          "(with this relay's options or OUTBOX_RELAY_* variables; it republishes the rows "
	          "committed since then and moves the slot record, with no window while the "
	          "application writes; README, \"Gaps\"), then start the relay as usual (the manual "
	          "steps, only while nothing writes: outbox-relay republish --since %s; then start "
	          "once with --accept-gap %s)",
	          pgrepl_errmsg(r->pg), r->cf->key_prefix, r->cf->slot,
	          lsn_format(r->cfm.rec_acked, conf),
	          r->cfm.commit_lsn ? lsn_format(r->cfm.commit_lsn, commit) : "(none recorded)",
	          relay_format_us(r->cfm.commit_us, when, sizeof(when)),
	          slot_record_heal_since(&(struct slot_record){.commit_us = r->cfm.commit_us}, since,
	                                 sizeof(since))
	              ? since
	              : "<the time of the last event in Redis>",
	          conf);
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
		g.commit_lsn = rec->commit_lsn;
		g.tli = rec->tli;
		confirm_record_read(&r->cfm, rec->confirmed, rec->commit_lsn, rec->commit_us);
	}
	g.published = relay_published(r);
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
	return relay_queue_record(r, true);
}

/* Returns an exit code for a permanent failure, or -1 to go on. */
int relay_try_pg(struct relay *r)
{
	enum pg_status st;
	char lsnbuf[LSN_STRLEN], endbuf[LSN_STRLEN];
	lsn_t from, end;

	/* A failover to a server without what Redis took is judged against all of it. */
	pgrepl_guard_published(r->pg, relay_published(r));
	st = pgrepl_start(r->pg);

	switch (st) {
	case PG_OK:
		if (!sink_redis_set_owner(r->sink, pgrepl_system_id(r->pg), pgrepl_dbname(r->pg))) {
			log_error("database name \"%s\" is too long", pgrepl_dbname(r->pg));
			return EXIT_PG_SETUP;
		}
		sink_redis_set_timeline(r->sink, pgrepl_timeline(r->pg));
		from = pgrepl_slot_confirmed(r->pg);
		end = pgrepl_start_wal_end(r->pg);
		sink_redis_backlog_start(r->sink, from, end);
		if (pgrepl_gap_accepted(r->pg)[0] && !accept_gap(r)) {
			log_error("out of memory");
			return EXIT_FAILURE_RUNTIME;
		}
		atomic_store_explicit(&r->m->plugin,
		                      strcmp(pgrepl_plugin(r->pg), "pgoutput") == 0
		                          ? METRICS_PLUGIN_PGOUTPUT
		                          : METRICS_PLUGIN_WAL2JSON,
		                      memory_order_relaxed);
		if (!r->pg_ever_started) {
			struct buf real = {0};

			if (strcmp(pgrepl_plugin(r->pg), "pgoutput") == 0)
				log_info("slot \"%s\" streams with pgoutput, publication \"%s\"%s", r->cf->slot,
				         pgrepl_publication(r->pg),
				         strcmp(r->cf->plugin, "pgoutput") != 0
				             ? " (the slot's plugin, not --plugin's)"
				             : "");
			else if (strcmp(r->cf->plugin, "wal2json") != 0)
				log_info("slot \"%s\" streams with wal2json (the slot's plugin, not --plugin's)",
				         r->cf->slot);

			buf_puts(&real, pgrepl_table_schema(r->pg));
			buf_putc(&real, '.');
			buf_puts(&real, pgrepl_table_name(r->pg));
			if (!real.failed && strcmp(real.data, r->cf->table) != 0)
				log_info("--table %s is the table %s: publishing its inserts", r->cf->table,
				         real.data);
			buf_finish(&real);
		}
		if (pgrepl_altered_failover(r->pg))
			log_info("slot \"%s\": FAILOVER switched on (--failover-slot), so standbys with "
			         "sync_replication_slots keep it",
			         r->cf->slot);
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
			log_info("streaming slot \"%s\"%s%s; the server's WAL ends at %s, %llu bytes ahead",
			         r->cf->slot,
			         pgrepl_created_slot(r->pg) ? " (created it)" : " from its confirmed position ",
			         pgrepl_created_slot(r->pg) ? "" : lsn_format(from, lsnbuf),
			         lsn_format(end, endbuf), end > from ? (unsigned long long)(end - from) : 0ULL);
		if (r->pg_ever_started)
			relay_count(&r->m->pg_reconnects);
		r->pg_ever_started = true;
		r->pg_down = r->standby = false;
		r->in_txn = false; /* pg_bo resets once a message arrives */
		r->spooling = r->replaying = false;
		sink_redis_held(r->sink, 0);
		relay_pgo_streams_reset(r);
		r->pgoutput = strcmp(pgrepl_plugin(r->pg), "pgoutput") == 0;
		if (r->pgoutput) {
			pgo_destroy(r->pgo);
			r->pgo = pgo_create();
			/* A transaction is held in memory up to --txn-memory, past that in a file. */
			if (!r->spool)
				r->spool = txn_spool_create((size_t)r->cf->txn_memory, NULL);
			if (!r->pgo || !r->spool) {
				log_error("out of memory creating the pgoutput decoder");
				return EXIT_FAILURE_RUNTIME;
			}
		}
		r->last_pg_msg_us = time_mono_us();
		r->last_status_us = 0; /* report our position right away */
		return -1;
	case PG_STANDBY:
		if (!r->standby)
			log_info("standby: slot \"%s\" is active in another process (%s); retrying "
			         "every %d ms and taking over when it is released",
			         r->cf->slot, pgrepl_errmsg(r->pg), STANDBY_RETRY_MS);
		r->standby = true;
		r->pg_bo.next_us =
		    time_mono_us() + (STANDBY_RETRY_MS / 2 + random() % STANDBY_RETRY_MS) * 1000;
		return -1;
	case PG_RETRY:
		relay_pg_lost(r, pgrepl_errmsg(r->pg));
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
int relay_record_arrived(struct relay *r)
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

int relay_try_redis(struct relay *r)
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
		relay_redis_lost(r, why);
		return -1;
	}
	case SINK_FATAL:
		log_error("Redis at %s: %s", where, sink_redis_errmsg(r->sink));
		return EXIT_REDIS_SETUP;
	}
	return -1;
}
