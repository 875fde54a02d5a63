/*
 * relay.c - the relay loop.
 *
 * One poll loop serves both sockets. WAL messages are decoded and mapped as
 * they arrive and queued to Redis right away, so memory stays bounded for
 * any transaction size; reading stops while the in-flight window is full.
 * While Redis owes replies and the replication socket is empty, the loop
 * waits for Redis alone, at most WAL_DEFER_MS (wal_defer()).
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
 * relay_advance_confirm() is the only place that feeds it acknowledgements, and
 * relay_send_status() the only place that sends what it answers.
 *
 * The slot record. Before a position is confirmed to PostgreSQL, Redis must
 * have acknowledged the slot record (sink_redis.h) at or past it: the flush
 * sent is min(acked, rec_acked), never below what was sent before. So the
 * slot this relay streams never stands past the record, and a start that
 * finds the slot missing, invalidated or past the record refuses (exit 8)
 * instead of streaming on over a gap (gap_refuse() in relay_conn.c). WAL
 * messages become events in relay_wal.c.
 */
#include "relay.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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
#include "relay_int.h"

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

/* ---- helpers ---- */

void relay_count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

void relay_gauge(_Atomic uint64_t *g, uint64_t v)
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

lsn_t relay_published(const struct relay *r)
{
	return r->cfm.sent_commit > r->cfm.commit_lsn ? r->cfm.sent_commit : r->cfm.commit_lsn;
}

/*
 * The record Redis acknowledged is this relay's own: from now on every start
 * (a reconnect after a failover included) checks the slot against it.
 */
void relay_refresh_guard(struct relay *r)
{
	char owner[200];
	struct slot_guard g = {.active = true,
	                       .confirmed = r->cfm.rec_acked,
	                       .owner = owner,
	                       .accept = r->cf->accept_gap,
	                       .commit_lsn = r->cfm.commit_lsn,
	                       .tli = pgrepl_timeline(r->pg),
	                       .published = relay_published(r)};

	snprintf(owner, sizeof(owner), "%s/%s", pgrepl_system_id(r->pg), pgrepl_dbname(r->pg));
	pgrepl_set_guard(r->pg, &g);
}

/* Take what Redis acknowledged: marks it covers, a slot record write (confirm.h). */
void relay_advance_confirm(struct relay *r)
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
		relay_refresh_guard(r);
}

/*
 * Queue a slot record write for the acknowledged position when it is ahead
 * of the record, none is in flight, and the last one is at least
 * STATUS_MIN_GAP_US old (or now). Returns false only when out of memory.
 */
bool relay_queue_record(struct relay *r, bool now)
{
	int64_t t = time_mono_us();

	/* Not while calls sent again after a lost connection are unacknowledged. */
	if (!r->guard_set || r->redis_down || !confirm_record_due(&r->cfm) ||
	    (!now && t - r->rec_last_us < STATUS_MIN_GAP_US))
		return true;
	if (!sink_redis_queue_record(r->sink, r->cfm.acked, r->cfm.commit_lsn, r->cfm.commit_us))
		return false;
	confirm_record_queued(&r->cfm, sink_redis_last_seq(r->sink));
	r->rec_last_us = t;
	return true;
}

bool relay_send_status(struct relay *r, bool reply_requested)
{
	lsn_t flush = confirm_flush(&r->cfm); /* never backwards */

	if (!pgrepl_send_status(r->pg, r->received, flush, reply_requested))
		return false;
	if (flush > r->cfm.confirmed) {
		atomic_store_explicit(&r->m->last_confirm_unix_us, time_now_us(), memory_order_relaxed);
		relay_gauge(&r->m->confirmed_lsn, flush);
	}
	confirm_sent(&r->cfm, flush);
	r->last_status_us = time_mono_us();
	return true;
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
	atomic_store_explicit(&m->redis_connected, sink_redis_connected(r->sink), memory_order_relaxed);
	atomic_store_explicit(&m->loop_heartbeat_mono_us, now, memory_order_relaxed);
	relay_gauge(&m->inflight_events, sink_redis_inflight_events(r->sink));
	relay_gauge(&m->inflight_bytes, sink_redis_inflight_bytes(r->sink));
	relay_gauge(&m->received_lsn, r->received);
	relay_gauge(&m->server_wal_end, r->server_wal_end);
	relay_gauge(&m->redis_reconnects, ss->reconnects);
	{
		uint64_t used = 0, max = 0;

		if (sink_redis_memory(r->sink, &used, &max)) {
			relay_gauge(&m->redis_used_memory, used);
			relay_gauge(&m->redis_maxmemory, max);
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
	relay_count(&r->m->trim_episodes);
	if (t.failed)
		log_warn("trim: %u of %u stream(s) trimmed, %llu entries removed; %u stream(s) "
		         "not trimmed (last error: %s), tried again in the next round",
		         t.trimmed, t.streams, (unsigned long long)t.removed, t.failed, t.err);
	else if (t.removed)
		log_info("trim: %u of %u stream(s) trimmed, %llu entries removed", t.trimmed, t.streams,
		         (unsigned long long)t.removed);
	else
		log_debug("trim: %u stream(s) checked, nothing consumed by every group to remove",
		          t.streams);
}

static void log_stats(struct relay *r, int64_t now)
{
	const struct sink_stats *s = sink_redis_stats(r->sink);
	double secs = (double)(now - r->last_stats_us) / 1e6;
	char c[LSN_STRLEN], rcv[LSN_STRLEN];

	log_info(
	    "stats: published=%llu (%.0f/s) replays=%llu duplicates=%llu dead_lettered=%llu "
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
	         "dead_lettered=%llu transactions=%llu ask_redirects=%llu native_batches=%llu "
	         "function_batches=%llu watch_retries=%llu native_groups=%llu native_ahead=%llu "
	         "ahead_voided=%llu native_late=%llu native_predicted=%llu predict_missed=%llu "
	         "lookups_skipped=%llu record_ids_read=%llu catchup_waits=%llu linger_windows=%llu "
	         "peak_rss_kb=%ld",
	         why, lsn_format(r->cfm.confirmed, c), (unsigned long long)s->published,
	         (unsigned long long)s->replays, (unsigned long long)s->duplicates,
	         (unsigned long long)s->dead_lettered,
	         (unsigned long long)atomic_load(&r->m->transactions),
	         (unsigned long long)s->ask_redirects, (unsigned long long)s->native_batches,
	         (unsigned long long)s->function_batches, (unsigned long long)s->watch_retries,
	         (unsigned long long)s->native_groups, (unsigned long long)s->native_ahead,
	         (unsigned long long)s->ahead_voided, (unsigned long long)s->native_late,
	         (unsigned long long)s->native_predicted, (unsigned long long)s->predict_missed,
	         (unsigned long long)s->lookups_skipped, (unsigned long long)s->record_ids_read,
	         (unsigned long long)s->catchup_waits, (unsigned long long)s->linger_windows,
	         relay_peak_rss_kb());
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
	pgo_destroy(r->pgo);
	relay_pgo_streams_reset(r); /* r->spool is its own again */
	txn_spool_destroy(r->spool);
	mapper_destroy(r->map);
	confirm_finish(&r->cfm);
	buf_finish(&r->content);
	buf_finish(&r->pgo_raw);
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
		code = relay_try_redis(r);
		if (code >= 0)
			return finish(r, code, "Redis setup failed");
	}
	/* The slot record, read at the first connect or again after a start
	 * found a gap: judge the slot against it before going on. */
	if (sink_redis_record_read(r->sink) &&
	    (!r->guard_set || (r->gap_wait && sink_redis_record_gen(r->sink) != r->gap_gen))) {
		code = relay_record_arrived(r);
		if (code >= 0)
			return finish(r, code, "the slot is not the one this relay streamed");
	}
	if (!r->stopping && !pgrepl_streaming(r->pg) && !r->gap_wait && now >= r->pg_bo.next_us) {
		/*
		 * The open batch goes before the server streams again: what it sends
		 * again after a reconnect never shares a call with what it sent before.
		 */
		if (!sink_redis_flush(r->sink, true))
			return out_of_memory(r);
		code = relay_try_pg(r);
		if (code >= 0)
			return finish(r, code, "PostgreSQL setup failed");
	}
	return true;
}

/* See relay_int.h. */
void relay_service_redis(struct relay *r)
{
	struct pollfd pfd[MAX_REDIS_FDS];
	int n;

	if (!sink_redis_connected(r->sink))
		return;
	n = sink_redis_pollfds(r->sink, pfd, MAX_REDIS_FDS);
	if (n <= 0 || poll(pfd, (nfds_t)n, 0) <= 0)
		return; /* nothing yet (or EINTR): the loop's own poll() comes soon */
	if (!sink_redis_io(r->sink, pfd, n))
		relay_redis_lost(r, sink_redis_errmsg(r->sink));
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
		int got;

		/* A held pgoutput transaction goes out first, as the window allows. */
		if (r->replaying && !relay_pgoutput_replay(r))
			return out_of_memory(r);
		if (r->replaying)
			break;
		got = pgrepl_next(r->pg, &m);

		if (got == 0)
			break;
		if (got < 0) {
			if (pgrepl_stream_fatal(r->pg)) {
				log_error("%s", pgrepl_errmsg(r->pg));
				return finish(r, EXIT_PG_SETUP, "the slot cannot be decoded");
			}
			relay_pg_lost(r, pgrepl_errmsg(r->pg));
			break;
		}
		r->pg_bo.attempt = 0; /* the stream delivers: progress */
		r->last_pg_msg_us = now;
		if (m.type == 'k') {
			if (m.wal_end > r->received)
				r->received = m.wal_end;
			if (m.wal_end > r->server_wal_end)
				r->server_wal_end = m.wal_end;
			if (!r->in_txn && !r->spooling &&
			    !confirm_mark(&r->cfm, sink_redis_last_seq(r->sink), m.wal_end, 0, 0))
				return out_of_memory(r);
			if (m.reply_requested) {
				relay_advance_confirm(r);
				if (!relay_send_status(r, false))
					relay_pg_lost(r, pgrepl_errmsg(r->pg));
			}
		} else if (!relay_handle_xlogdata(r, &m)) {
			return out_of_memory(r);
		}
		if (i % REDIS_SERVICE_EVERY == REDIS_SERVICE_EVERY - 1)
			relay_service_redis(r);
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
		relay_redis_lost(r, sink_redis_errmsg(r->sink));
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

	relay_advance_confirm(r);
	if (!relay_queue_record(r, r->stopping ||
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
			if (!relay_send_status(r, silent >= (int64_t)cf->status_interval_ms * 1000))
				relay_pg_lost(r, pgrepl_errmsg(r->pg));
		}
		if (cf->pg_timeout_ms > 0 && pgrepl_streaming(r->pg) &&
		    silent > (int64_t)cf->pg_timeout_ms * 1000) {
			char why[128];

			snprintf(why, sizeof(why), "no message from the server within %d ms (--pg-timeout)",
			         cf->pg_timeout_ms);
			relay_pg_lost(r, why);
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

/*
 * Whether this turn waits for Redis alone: Redis owes replies to all that
 * was written, and the replication socket holds nothing. The walsender sends
 * every message as it is decoded, so a relay that also waited for the WAL
 * would be woken for each one (a few hundred bytes) while Redis works on the
 * last batch, and on two cores it is often queued behind the walsender that
 * woke it. Left out of poll(), the socket fills without waking the relay,
 * which reads what came when Redis answers, at most WAL_DEFER_MS later (the
 * loop then consumes the socket whether poll() saw it or not).
 * tests/bench/RESULTS.md, "Waiting for Redis alone while it owes replies",
 * has the measurement. A batch that waits for more events while the relay
 * catches up (sink_redis.c, coalescing()) is in flight but owes no reply: the
 * relay keeps reading the WAL then (RESULTS.md, "The hold while catching up,
 * with the WAL read during it").
 */
static bool wal_defer(const struct relay *r)
{
	int avail = 0;

	if (!sink_redis_connected(r->sink) || sink_redis_want_write(r->sink) ||
	    sink_redis_inflight_events(r->sink) == 0 || !sink_redis_owes_replies(r->sink))
		return false;
	return ioctl(pgrepl_fd(r->pg), FIONREAD, &avail) == 0 && avail == 0;
}

/* Wait for the sockets (or the next deadline), then take what they have. */
static bool step_wait(struct relay *r, int64_t now, bool more)
{
	struct pollfd pfd[1 + MAX_REDIS_FDS];
	int npfd = 0, pg_i = -1, rd_i = -1, nrd = 0;
	int timeout = more ? 0 : wait_ms(r, now);
	bool deferred = false;

	if (pgrepl_streaming(r->pg) && !r->stopping && !sink_redis_full(r->sink)) {
		if (timeout > 0 && wal_defer(r)) {
			deferred = true;
			if (timeout > WAL_DEFER_MS)
				timeout = WAL_DEFER_MS;
		} else {
			pg_i = npfd;
			pfd[npfd++] = (struct pollfd){.fd = pgrepl_fd(r->pg), .events = POLLIN};
		}
	}
	if (timeout != 0) {
		int64_t hold = sink_redis_hold_left_us(r->sink);

		if (hold > 0 && (timeout < 0 || hold < (int64_t)timeout * 1000))
			timeout = (int)((hold + 999) / 1000);
	}
	if (sink_redis_connected(r->sink)) {
		rd_i = npfd;
		nrd = sink_redis_pollfds(r->sink, pfd + npfd, MAX_REDIS_FDS);
		npfd += nrd;
	}
	if (poll(pfd, (nfds_t)npfd, timeout) < 0) {
		if (errno == EINTR)
			return true;
		log_error("poll failed: %s", strerror(errno));
		return finish(r, EXIT_FAILURE_RUNTIME, "poll failed");
	}
	if (((pg_i >= 0 && (pfd[pg_i].revents & (POLLIN | POLLERR | POLLHUP))) || deferred) &&
	    !pgrepl_consume(r->pg))
		relay_pg_lost(r, pgrepl_errmsg(r->pg));
	if (rd_i >= 0 && !sink_redis_io(r->sink, pfd + rd_i, nrd))
		relay_redis_lost(r, sink_redis_errmsg(r->sink));
	if (sink_redis_connected(r->sink) && !sink_redis_check_stall(r->sink, time_mono_us()))
		relay_redis_lost(r, sink_redis_errmsg(r->sink));
	return true;
}

/* One turn of the loop; false when the run is over (r->rc, r->final_reason, r->oom say how). */
static bool relay_turn(struct relay *r)
{
	int64_t now = time_mono_us();
	bool more;

	return step_stop(r, now) && step_connect(r, now) && step_wal(r, now, &more) && step_redis(r) &&
	       step_confirm(r, now) && step_housekeeping(r, now) && step_wait(r, now, more);
}

/*
 * One run of the relay. *refused: in, the size from which values are
 * dead-lettered (0: no such limit); out, when Redis refused a value Redis
 * would refuse again, its size (relay_run then runs again), else unchanged.
 */
static int relay_run_once(const struct relay_config *cf, uint64_t *refused)
{
	struct relay r = {.cf = cf, .refused = *refused, .block = -1};
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

	relay_advance_confirm(&r);
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
	fprintf(out, "  redis            %s\n",
	        redis_target_describe(&cf->redis, where, sizeof(where)));
	fprintf(out, "  stream           %s\n", cf->stream);
	fprintf(out, "  dead letters     %s\n", cf->dead_letter_stream);
	fprintf(out, "  dedup window     %llds\n", (long long)cf->dedup_window_s);
	fprintf(out, "  groups           %zu\n", cf->ngroups);
	fprintf(out, "  http             %s\n",
	        cf->http_addr && cf->http_addr[0] ? cf->http_addr : "off");
	if (cf->endpos != LSN_INVALID)
		fprintf(out, "  endpos           %s\n", lsn_format(cf->endpos, lsnbuf));
	if (cf->check_config_offline)
		return EXIT_OK;
	return check_prerequisites(cf, out);
}
