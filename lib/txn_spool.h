/*
 * txn_spool.h - the messages of one transaction, kept in order until its
 * commit: in memory up to a cap, then in a temporary file.
 *
 * Why: pgoutput's Begin names the commit record's start, not its end, and
 * the events' _lsn (and their position in the publish call) is the end,
 * which arrives only with the Commit. A transaction's pgoutput messages are
 * therefore held from Begin to Commit and decoded then (the decoder is
 * deterministic, so decoding later gives what decoding at once would have:
 * a Relation message inside the transaction is held in its place). A large
 * transaction must not cost its size in memory: past mem_cap bytes the
 * messages go to a file created in dir and unlinked at once (nothing is
 * left behind by a crash; the slot sends the transaction again).
 *
 * Ownership: the spool copies what spool_add() is given; the bytes
 * spool_next() returns are the spool's, valid until the next spool_next(),
 * spool_clear() or spool_destroy() -- unless txn_spool_take_buffer() took
 * them. Pure but for the file: no logging.
 */
#ifndef RELAY_TXN_SPOOL_H
#define RELAY_TXN_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lsn.h"

struct txn_spool;

/* mem_cap: bytes kept in memory (records and their 12-byte headers); dir:
 * where the file goes (NULL: $TMPDIR, else /tmp). NULL when out of memory. */
struct txn_spool *txn_spool_create(size_t mem_cap, const char *dir);
void txn_spool_destroy(struct txn_spool *s); /* NULL is a no-op; closes the file */

/* Append a copy of one message and the LSN it came with. False on a
 * failure (out of memory, the file: txn_spool_errmsg()); the spool is then
 * unusable until txn_spool_clear(). */
bool txn_spool_add(struct txn_spool *s, const char *data, size_t len, lsn_t wal_start);

/*
 * The messages in the order they were added, from the first after
 * txn_spool_clear() or the last txn_spool_rewind(): 1 with *data, *len and
 * *wal_start set, 0 after the last, -1 on a failure (txn_spool_errmsg()).
 */
int txn_spool_next(struct txn_spool *s, const char **data, size_t *len, lsn_t *wal_start);
/*
 * The allocation the last txn_spool_next() read its message into when it
 * came from the file and is PGO_BY_REFERENCE bytes or more (NULL otherwise:
 * in memory, or in a block of the file read at once, one allocation for
 * many). txn_spool_take_buffer() hands it over: the caller frees it with
 * free(), and the next read allocates another. So a sink may keep pointers
 * into a large message (sink_redis.h) with no copy of its own.
 */
void *txn_spool_buffer(const struct txn_spool *s);
void *txn_spool_take_buffer(struct txn_spool *s);

/* Read from the first message again. False on a file failure. */
bool txn_spool_rewind(struct txn_spool *s);

/* Forget every message (the file is truncated, kept open for the next). */
void txn_spool_clear(struct txn_spool *s);

size_t txn_spool_count(const struct txn_spool *s);     /* messages held */
uint64_t txn_spool_bytes(const struct txn_spool *s);   /* their bytes, headers included */
uint64_t txn_spool_spilled(const struct txn_spool *s); /* of which in the file */
const char *txn_spool_errmsg(const struct txn_spool *s);

#endif
