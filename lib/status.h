/*
 * status.h - `outbox-relay status`: a one-shot, human-readable report of the
 * replication slot (pg_replication_slots, over a normal libpq connection)
 * and of the Redis streams the relay writes (length, last id, consumer
 * groups with their pending entries and lag, the relay's watermark).
 */
#ifndef RELAY_STATUS_H
#define RELAY_STATUS_H

/*
 * Run the subcommand. argv[0] is "status"; the options are the relay's own
 * (--pg-dsn, --pg-password-file, --slot, --redis-url, --redis-password-file,
 * --key-prefix and the OUTBOX_RELAY_* variables, parsed by config_load(), so
 * every other relay option is accepted and ignored) plus --stream-pattern
 * (OUTBOX_RELAY_STREAM_PATTERN, default "outbox:*"). envp is a
 * NULL-terminated "NAME=value" array.
 *
 * Prints the report on stdout, problems included inline; passwords are
 * never printed. Returns the exit code: 0, 2 bad options, 3 PostgreSQL
 * unreachable, 4 slot missing, 5 Redis unreachable. When several apply the
 * first in that order wins; every section that can be shown is shown.
 */
int status_main(int argc, char **argv, char **envp);

#endif
