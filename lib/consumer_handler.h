/*
 * consumer_handler.h - outbox-consume's worker mode: each event (its JSON
 * line, consumer_render.h) is handed to a program, and acknowledged only when
 * the program says it succeeded.
 *
 *  - exec (--exec CMD): one `/bin/sh -c CMD` per event, the line on its
 *    stdin; exit status 0 is done, anything else a failure.
 *  - co-process (--handler CMD): one long-running `/bin/sh -c CMD`; for each
 *    event a line on its stdin, and one answer line back on its stdout:
 *    "done", "retry[ reason]" or "dead[ reason]". A co-process that exits or
 *    answers anything else fails the event and is started again for the next.
 *
 * The program's stderr is the consumer's (the log); in exec mode its stdout
 * goes there too. A stop signal does not interrupt a handler: the event in
 * hand is finished first (the caller checks for the signal between events).
 */
#ifndef RELAY_CONSUMER_HANDLER_H
#define RELAY_CONSUMER_HANDLER_H

#include <stdbool.h>
#include <stddef.h>

enum handler_result {
	HANDLER_DONE = 0, /* acknowledge */
	HANDLER_RETRY,    /* leave pending: delivered again later */
	HANDLER_DEAD      /* the handler says it can never succeed: dead-letter it now */
};

struct handler;

/* exec_cmd or coproc_cmd (exactly one not NULL). NULL when out of memory. */
struct handler *handler_create(const char *exec_cmd, const char *coproc_cmd);
/* Closes a co-process's stdin and waits for it to exit. NULL is a no-op. */
void handler_destroy(struct handler *h);

/*
 * Hand one event line (without its newline) to the handler and wait for the
 * outcome. why receives the reason of a RETRY or DEAD (an exit status, a
 * signal, the answer's reason).
 */
enum handler_result handler_run(struct handler *h, const char *line, size_t len, char *why,
                                size_t whylen);

#endif
