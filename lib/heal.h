/*
 * heal.h - `outbox-relay heal`: the gap the relay refused (exit 8) closed in
 * one command, with no window while the application writes (README, "Gaps").
 */
#ifndef RELAY_HEAL_H
#define RELAY_HEAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"

/*
 * Heal the gap: see heal.c. Prints its outcome to stdout, errors to the log.
 * Returns the exit code: 0 healed or nothing to heal, 1 interrupted, 2 usage,
 * 3 PostgreSQL, 4 slot, 5 Redis, 6 table or column missing, 7 the record is
 * another database's.
 */
int heal_main(const struct relay_config *cf);

/* `outbox-relay heal --help`. */
void heal_usage(FILE *out);

#endif
