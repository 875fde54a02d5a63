/*
 * lsn.h - WAL positions (LSNs) and PostgreSQL protocol time helpers.
 *
 * An LSN is a 64-bit WAL byte position, written "X/Y" in hex (the high and
 * low 32 bits), as PostgreSQL prints pg_lsn values.
 */
#ifndef RELAY_LSN_H
#define RELAY_LSN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t lsn_t;

#define LSN_INVALID ((lsn_t)0)
/* Longest "X/Y" rendering: 8 + 1 + 8 hex digits plus NUL. */
#define LSN_STRLEN 18

/*
 * Parse "X/Y" (1 to 8 hex digits each side, case-insensitive) from s[0..len).
 * Returns true and writes *ret only when the whole input is a valid LSN.
 */
bool lsn_parse(const char *s, size_t len, lsn_t *ret);

/* Write "X/Y" (upper-case hex, no padding) into buf; returns buf. */
char *lsn_format(lsn_t lsn, char buf[LSN_STRLEN]);

/* Microseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t time_now_us(void);
/* Microseconds since an arbitrary point (CLOCK_MONOTONIC). */
int64_t time_mono_us(void);
/* Unix microseconds to PostgreSQL protocol time (microseconds since 2000-01-01 UTC). */
int64_t time_unix_to_pg(int64_t unix_us);

/*
 * Parse a PostgreSQL timestamptz text such as "2026-11-21 23:51:54.887293+00"
 * (or "+05:30", "-08") into Unix microseconds. False on anything else.
 */
bool time_parse_pg(const char *s, size_t len, int64_t *ret_unix_us);
/* Unix microseconds as "2026-11-24T12:00:00.123456Z" into buf; NULL for us <= 0. */
const char *time_format_iso(int64_t us, char *buf, size_t len);

/* Big-endian helpers for the replication protocol. */
void put_be64(unsigned char *p, uint64_t v);
uint64_t get_be64(const unsigned char *p);

#endif
