/*
 * sink_error.h - the kinds of Redis failure: one list for the sink's retry
 * rule (sink_error_is_fatal) and the metric outbox_relay_redis_errors_total,
 * whose "kind" label each kind maps to (metrics.c; some kinds share a label).
 */
#ifndef RELAY_SINK_ERROR_H
#define RELAY_SINK_ERROR_H

#include <stdbool.h>
#include <stddef.h>

/* Kind of the last failure, for metrics and the retry rule (see README). */
enum sink_error_kind {
	SINK_ERR_NONE = 0,  /* counted as "io" (a connect that failed before any reply) */
	SINK_ERR_OOM,       /* "OOM command not allowed ...": retried with backoff */
	SINK_ERR_WRONGTYPE, /* a stream key holds another type: retried with backoff until fixed */
	SINK_ERR_NOSCRIPT,  /* function/script missing (FUNCTION FLUSH, restart): reloaded on reconnect
	                     */
	SINK_ERR_READONLY,  /* connected to a replica: retried (a failover may fix it) */
	SINK_ERR_BUSY,      /* BUSY, LOADING, MASTERDOWN: retried */
	SINK_ERR_OTHER,     /* any other error reply: retried */
	SINK_ERR_IO,        /* connection failed or closed */
	SINK_ERR_TIMEOUT,   /* no reply within --redis-timeout */
	SINK_ERR_CLUSTER, /* MOVED, ASK, TRYAGAIN, CLUSTERDOWN: slot map refreshed, everything re-routed
	                   */
	SINK_ERR_WAIT,    /* WAIT/WAITAOF fell short: nothing counted, everything sent again */
	SINK_ERR_ORDER,   /* a call ran while an earlier one for its stream had not: resent in order */
	SINK_ERR_FOREIGN, /* the watermark belongs to another database: permanent ("state") */
	SINK_ERR_LOST,    /* Redis lost writes it had acknowledged: permanent ("state") */
	SINK_ERR_TOO_BIG, /* a value over the server's proto-max-bulk-len (sink_redis_refused_value) */
	SINK_ERR_NOPERM,  /* the ACL user may not run a command: permanent (configuration) */
	SINK_ERR_NKINDS
};

/* Failures no retry can fix: the relay stops (see relay.c). */
static inline bool sink_error_is_fatal(enum sink_error_kind k)
{
	return k == SINK_ERR_FOREIGN || k == SINK_ERR_LOST || k == SINK_ERR_NOPERM ||
	       k == SINK_ERR_TOO_BIG;
}

/*
 * An ACL refusal: "NOPERM ..." for a command the relay sends, "ERR The user
 * executing the script can't ..." for one the function or script sends.
 */
bool sink_error_noperm(const char *msg);
/* An ACL refusal of a key (not of a command). */
bool sink_error_key_refusal(const char *msg);
/* The kind of error reply msg (its first word, or what the function raised). */
enum sink_error_kind sink_error_classify(const char *msg);
/*
 * One line for an ACL refusal msg of what into buf: the permission to grant,
 * from the reply's "'wait' command" when it names one, else fix (NULL: say
 * which keys and commands).
 */
void sink_error_noperm_text(char *buf, size_t len, const char *what, const char *fix,
                            const char *msg);

#endif
