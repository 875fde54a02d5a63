/*
 * relay_int.h - the relay's state, shared by lib/relay.c (the loop),
 * relay_wal.c (WAL messages to events) and relay_conn.c (connecting, losing
 * and judging the servers). Private to those three files.
 */
#ifndef RELAY_RELAY_INT_H
#define RELAY_RELAY_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "confirm.h"
#include "config.h"
#include "event.h"
#include "lsn.h"
#include "metrics.h"
#include "pgrepl.h"
#include "relay.h"
#include "sink_redis.h"
#include "pgoutput.h"
#include "txn_spool.h"
#include "wal2json.h"

#define MSGS_PER_ROUND 1024
/* Decoding this many messages in a row, the loop takes Redis's replies (relay_service_redis). */
#define REDIS_SERVICE_EVERY 64
#define STATUS_MIN_GAP_US 100000 /* rate limit for "confirmed moved" updates */
#define STANDBY_RETRY_MS 2000
#define RETRY_BASE_MS 200
#define STATS_INTERVAL_US 30000000
#define WAL_DEFER_MS 1         /* longest wait for Redis alone (wal_defer) */
#define MEMORY_POLL_US 5000000 /* INFO memory for /metrics and /readyz */
#define MAX_REDIS_FDS 64       /* one per Redis Cluster master */

struct relay {
	const struct relay_config *cf;
	struct pgrepl *pg;
	struct sink_redis *sink;
	struct metrics *m;
	struct metrics_server *http;
	struct w2j_decoder *dec;
	struct mapper *map;
	/* pgoutput slots: the decoder (made anew at every start: the server sends
	 * its Relation messages again) and the transaction held until its Commit,
	 * which alone carries the commit end the events' _lsn is (txn_spool.h). */
	bool pgoutput;
	struct pgo_decoder *pgo;
	struct txn_spool *spool;
	bool spooling;    /* between a pgoutput Begin and its Commit */
	bool replaying;   /* the held transaction is being handled (relay_pgoutput_replay) */
	lsn_t replay_end; /* its commit end */
	/*
	 * pgoutput streaming (pgoutput.h): each transaction the server has
	 * streamed and not yet committed or aborted, held until its Stream
	 * Commit. One owner: streams[] owns each spool and aborted list. At a
	 * Stream Commit the transaction's spool trades places with r->spool for
	 * its replay (spool_idle holds r->spool's own meanwhile) and its aborted
	 * subtransactions move to replay_aborted; both are freed when the replay
	 * ends (relay_pgo_streams_reset() on a lost connection).
	 */
	struct pgo_held {
		uint32_t xid;
		struct txn_spool *spool;
		uint32_t *aborted; /* subtransactions a Stream Abort ended: their changes are skipped */
		size_t naborted;
	} * streams;
	size_t nstreams;
	long block; /* index in streams of the transaction whose block is open, -1: none */
	struct txn_spool *spool_idle;
	bool replay_streamed;                /* the replay is a streamed transaction's */
	struct pgo_stream_msg replay_commit; /* ... and this is its Stream Commit */
	uint32_t *replay_aborted;
	size_t replay_naborted;

	/* Current transaction (between B and C). */
	bool in_txn;
	struct txn_info tx;
	char committed_at[64];
	uint32_t next_index;
	struct buf content; /* copy of a logical message's content */
	struct buf pgo_raw; /* a pgoutput change as wal2json prints it: a dead letter's raw */

	struct confirm cfm; /* marks, acknowledged and confirmed positions (confirm.h) */

	lsn_t received;       /* highest LSN seen on the stream */
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
	bool stopping;         /* a stop signal came: draining */
	int64_t stop_deadline; /* ... until then (--shutdown-timeout) */
	int rc;                /* the exit code, EXIT_OK unless a step says otherwise */
	const char *final_reason;
	bool oom;
	int64_t memory_poll_us; /* when INFO memory was last asked for */
	int64_t trim_us;        /* when the last --trim acked round was started */
	char policy_warned[32]; /* the volatile-* policy last warned about */
	uint64_t last_stats_published;
	char last_notice[512]; /* the server notice logged last, and when */
	int64_t last_notice_us;
};

/* relay_wal.c: forget every streamed transaction held (the server sends them again). */
void relay_pgo_streams_reset(struct relay *r);

/* relay.c */
void relay_count(_Atomic uint64_t *c);
void relay_gauge(_Atomic uint64_t *g, uint64_t v);
/* The record Redis acknowledged is this relay's own: every start checks the slot against it. */
void relay_refresh_guard(struct relay *r);
/*
 * The highest commit whose events this process handed to Redis, acknowledged
 * or not (a call in flight at a failover may still land), or the record's:
 * the position the server's history must hold (slot_history_diverged()).
 */
lsn_t relay_published(const struct relay *r);
/* Take what Redis acknowledged: marks it covers, a slot record write (confirm.h). */
void relay_advance_confirm(struct relay *r);
/* Queue a slot record write when one is due (now: without the rate limit); false when out of
 * memory. */
bool relay_queue_record(struct relay *r, bool now);
/* A standby status update with the flush position confirm_flush() allows. */
bool relay_send_status(struct relay *r, bool reply_requested);

/*
 * Read Redis's replies that have arrived, and send what they let go next, without waiting:
 * called between messages while a long run of WAL is decoded, so that Redis does not sit idle
 * until the run ends (a native group's next round, a full batch).
 */
void relay_service_redis(struct relay *r);

/* relay_wal.c: one XLogData message; false only on a fatal (out-of-memory) failure. */
bool relay_handle_xlogdata(struct relay *r, const struct pg_msg *m);
/* Handle held pgoutput messages while the sink has room; false only on a fatal failure. */
bool relay_pgoutput_replay(struct relay *r);

/* relay_conn.c: losing a server (retry with backoff), and (re)connecting: an exit code, or -1 to go
 * on. */
void relay_pg_lost(struct relay *r, const char *why);
void relay_redis_lost(struct relay *r, const char *why);
int relay_try_pg(struct relay *r);
int relay_try_redis(struct relay *r);
/* The slot record arrived (first connect, or a re-read after a gap): judge the slot. */
int relay_record_arrived(struct relay *r);

#endif
