/*
 * relay.h - the relay loop: WAL in, Redis out, LSN confirmed only behind
 * Redis acknowledgements.
 */
#ifndef RELAY_RELAY_H
#define RELAY_RELAY_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "event.h"
#include "wal2json.h"

/*
 * Run until --endpos is confirmed, a stop signal has been handled, or a
 * permanent failure. Returns the process exit code (enum relay_exit).
 * Installs SIGINT/SIGTERM handlers (a second signal exits at once) and
 * ignores SIGPIPE.
 */
int relay_run(const struct relay_config *cf);

/*
 * --check-config: validate what can be validated without connecting (the
 * stream template too) and print the effective configuration without
 * secrets to out; then, unless cf->check_config_offline, check the
 * prerequisites (preflight.h) and print one line per item and a summary
 * "N problem(s) found". Returns EXIT_OK, EXIT_USAGE (invalid options) or
 * EXIT_CHECK_PROBLEMS.
 */
int relay_check_config(const struct relay_config *cf, FILE *out);

/* Exponential backoff with jitter: RETRY_BASE_MS (200 ms) doubling up to a cap. */
struct backoff {
	int attempt;
	int64_t next_us; /* monotonic time of the next attempt */
};
/* Schedule the next attempt (b->next_us) and return its delay in ms. */
int64_t backoff_next(struct backoff *b, int cap_ms);

/* Peak resident set size of this process in KiB (VmHWM), -1 when unknown. */
long relay_peak_rss_kb(void);

/*
 * One row or message to the event the relay publishes: mapper_map(), then
 * the --max-event-bytes rule (a larger event becomes a DEAD_TOO_LARGE dead
 * letter, its reason written to why), and the same for a field value over
 * max_value (Redis's proto-max-bulk-len, 0 unknown). The stream path and republish both
 * map through here, so they publish the same entries.
 */
enum map_result relay_map_event(struct mapper *m, const struct relay_config *cf,
                                const struct txn_info *tx, uint32_t index,
                                const struct w2j_field *fields, size_t n, const char *raw,
                                size_t len, uint64_t max_value, struct event *ev,
                                const char **reason, char *why, size_t whylen);

#endif
