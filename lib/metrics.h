/*
 * metrics.h - counters and gauges the relay loop updates, served by an HTTP
 * endpoint (libmicrohttpd, its own thread) as Prometheus text, plus health
 * and readiness probes.
 *
 * The relay loop only does relaxed atomic stores/adds on these fields and
 * never waits for the HTTP thread. Label sets that depend on data (streams)
 * are bounded: after METRICS_MAX_STREAMS distinct streams, further ones are
 * counted under stream="_other".
 */
#ifndef RELAY_METRICS_H
#define RELAY_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sink_error.h"

#define METRICS_MAX_STREAMS 256

enum relay_state {
	STATE_STARTING = 0, /* not yet streaming */
	STATE_STREAMING,    /* PostgreSQL streaming and Redis connected */
	STATE_STANDBY,      /* slot held by another relay: waiting */
	STATE_RETRYING,     /* PostgreSQL or Redis down: reconnecting with backoff */
	STATE_STOPPING
};

enum dead_reason {
	DEAD_ID_MISSING = 0, /* id column absent, NULL or empty */
	DEAD_ROUTING,        /* routing column absent/NULL, stream name empty/too long/unusable */
	DEAD_NOT_JSON,       /* message content not a JSON object */
	DEAD_UNDECODABLE,    /* wal2json output the decoder rejected */
	DEAD_TOO_LARGE,      /* event over --max-event-bytes */
	DEAD_REDIS_REJECTED, /* Redis refused the entry permanently (e.g. WRONGTYPE) */
	DEAD_OTHER,
	DEAD_NREASONS
};

enum ignored_kind { IGN_UPDATE = 0, IGN_DELETE, IGN_TRUNCATE, IGN_MESSAGE, IGN_NKINDS };

/* outbox_relay_info's plugin label: "" until the relay streams, then the slot's plugin. */
enum metrics_plugin {
	METRICS_PLUGIN_UNKNOWN = 0,
	METRICS_PLUGIN_WAL2JSON,
	METRICS_PLUGIN_PGOUTPUT
};

/* Commit->publish latency buckets, seconds (upper bounds; +Inf implied). */
#define METRICS_LATENCY_BUCKETS 14
extern const double metrics_latency_bounds[METRICS_LATENCY_BUCKETS];

struct metrics {
	/* Events (relay loop writes, HTTP thread reads). */
	_Atomic uint64_t published[METRICS_MAX_STREAMS + 1]; /* by stream id; last slot = "_other" */
	_Atomic uint64_t replays_skipped;
	_Atomic uint64_t duplicates_skipped;
	_Atomic uint64_t dead_lettered[DEAD_NREASONS];
	_Atomic uint64_t ignored[IGN_NKINDS];
	_Atomic uint64_t redis_errors[SINK_ERR_NKINDS]; /* by enum sink_error_kind */
	_Atomic uint64_t pg_reconnects;
	_Atomic uint64_t redis_reconnects;
	_Atomic uint64_t batches_native;   /* batches written by --publish native */
	_Atomic uint64_t batches_function; /* batches written by the function */
	_Atomic uint64_t watch_retries;    /* native batches read again after a watched key changed */
	_Atomic uint64_t lookups_skipped;  /* dedup lookups the native path's id record left out */
	_Atomic uint64_t record_bytes;     /* the id records' filters, all connections (a gauge) */
	_Atomic uint64_t record_ids_read;  /* ids read from Redis into the id records */
	_Atomic uint64_t transactions;
	_Atomic uint64_t trimmed_entries; /* --trim acked: entries XTRIM removed */
	_Atomic uint64_t trim_episodes;   /* --trim acked: trim rounds completed */

	/* Gauges. */
	_Atomic uint64_t inflight_events;
	_Atomic uint64_t inflight_bytes;
	_Atomic uint64_t received_lsn;
	_Atomic uint64_t confirmed_lsn;
	_Atomic uint64_t server_wal_end;      /* newest keepalive walEnd: the server's sent position */
	_Atomic int64_t last_confirm_unix_us; /* when the confirmed LSN last moved (0: never) */
	_Atomic int64_t loop_heartbeat_mono_us; /* relay loop's last iteration (monotonic) */
	_Atomic int state;                      /* enum relay_state */
	_Atomic bool redis_connected;
	_Atomic uint64_t redis_used_memory; /* INFO memory of the node closest to its maxmemory */
	_Atomic uint64_t redis_maxmemory;   /* 0: no limit */
	_Atomic bool redis_memory_known;
	_Atomic int plugin; /* the slot's plugin, once streaming: enum metrics_plugin */

	/* Latency histogram (cumulative on render). */
	_Atomic uint64_t latency_bucket[METRICS_LATENCY_BUCKETS + 1]; /* non-cumulative; last = +Inf */
	_Atomic uint64_t latency_count;
	_Atomic uint64_t latency_sum_us;

	/* Stream names for the "stream" label; written by the relay loop under
	 * the lock, read by the HTTP thread under the lock. */
	void *streams_priv;
};

/* Allocate zeroed metrics (NULL on OOM). */
struct metrics *metrics_create(void);
void metrics_destroy(struct metrics *m); /* NULL is a no-op */

/* Stream id for the "stream" label: METRICS_MAX_STREAMS when the table is full ("_other"). */
uint32_t metrics_stream_id(struct metrics *m, const char *name, size_t len);
/* Record one commit->publish latency sample. */
void metrics_observe_latency(struct metrics *m, int64_t micros);

/* Render the Prometheus text exposition into a malloc'd string (caller frees). */
char *metrics_render(struct metrics *m, const char *slot);

struct metrics_server;
/*
 * Serve GET /metrics, /healthz and /readyz on addr ("host:port", ":port" for
 * all interfaces, "[::1]:port"). Returns NULL with a one-line err on a bad
 * address or a port in use. The server runs in its own thread.
 * /healthz: 200 while the loop heartbeat is younger than stuck_after_ms, else 503.
 * /readyz:  200 when state is STREAMING and Redis is connected, else 503; the
 *           body says "ready redis-memory-pressure" above 90% of maxmemory.
 */
struct metrics_server *metrics_server_start(struct metrics *m, const char *addr, const char *slot,
                                            int stuck_after_ms, char *err, size_t errlen);
void metrics_server_stop(struct metrics_server *s); /* NULL is a no-op */
/* The TCP port the server listens on (the ephemeral one when addr said port 0). */
int metrics_server_port(const struct metrics_server *s);

#endif
