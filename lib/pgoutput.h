/*
 * pgoutput.h - decoder for PostgreSQL's built-in pgoutput logical replication
 * protocol (version 1, plus the 'M' logical messages of `messages 'true'`).
 *
 * Pure: no I/O, no logging. Each XLogData payload is one protocol message;
 * pgo_decode() turns one into zero or one struct w2j_change, the same change
 * lib/wal2json.c gives for the line wal2json (format-version 2, the relay's
 * options) prints for the same WAL: values rendered and typed by type OID the
 * way wal2json 2.5 renders them, so the relay loop can take either decoder.
 * What pgoutput cannot tell, and the difference that follows:
 *  - Begin carries no end-of-commit LSN: a B change's nextlsn is LSN_INVALID
 *    (the C change has both lsn and nextlsn).
 *  - Insert/Update/Delete/Truncate carry no LSN of their own: the caller passes
 *    the XLogData header's dataStart, which the walsender sets to the change's
 *    record LSN (the "lsn" wal2json prints).
 *  - The commit time comes as a number and is rendered in UTC ("…+00") with
 *    DateStyle ISO, as timestamptz_to_str() prints it when TimeZone is UTC:
 *    the relay sets TimeZone = 'UTC' and DateStyle = 'ISO' on its replication
 *    connection, which also makes the walsender's text values the same.
 *  - Transactions with nothing published (DDL only, other tables) produce no
 *    B/C at all (PostgreSQL 15+ pgoutput skips them); wal2json sends B and C.
 *  - Type names come from a table of built-in types (format_type() with the
 *    column's typmod), from names the caller registers, else from the
 *    server's Type messages, which name a domain by its base type.
 *
 * Ownership: every pointer inside a returned w2j_change points into memory
 * owned by the decoder (its relation cache and its buffers) and stays valid
 * until the next pgo_decode() call on the same decoder, or pgo_destroy() --
 * except a string column value of PGO_BY_REFERENCE bytes or more (its
 * value_len: a bytea counted without the "\x" it has on the wire), which
 * points into the message passed to pgo_decode() (valid while it is: not
 * copied, so that a large value costs no copy here) and is length-counted
 * only, not NUL-terminated. Every other string is NUL-terminated as well.
 */
#ifndef RELAY_PGOUTPUT_H
#define RELAY_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#define PGO_BY_REFERENCE 65536 /* see Ownership above */
#include <stdint.h>

#include "lsn.h"
#include "wal2json.h"

struct pgo_decoder;

struct pgo_decoder *pgo_create(void);    /* NULL when out of memory */
void pgo_destroy(struct pgo_decoder *d); /* NULL is a no-op */

/*
 * Decode one pgoutput message buf[0..len) (the XLogData payload, after the
 * 25-byte header); wal_start is that header's dataStart. Returns true on
 * success, with *has_change saying whether *out was filled: Begin, Commit,
 * Insert, Update (new tuple), Delete, Truncate and Message give a change;
 * Relation and Type update the decoder's caches, Origin is ignored. Returns
 * false on a truncated or malformed message, an unknown message type, a
 * streaming or two-phase message (protocol version 2+), binary tuple data, a
 * change for a relation no Relation message described, or a change outside
 * Begin..Commit; pgo_errmsg() then says why. A Truncate of several relations
 * gives the first here and the others through pgo_next().
 */
bool pgo_decode(struct pgo_decoder *d, const char *buf, size_t len, lsn_t wal_start,
                struct w2j_change *out, bool *has_change);

/*
 * The next change of the message the last pgo_decode() decoded (only a
 * Truncate of several relations has more than one): true and *out filled, or
 * false when there is none left. Does not invalidate earlier changes.
 */
bool pgo_next(struct pgo_decoder *d, struct w2j_change *out);

/*
 * Name the type with this OID as `type` of its columns (what
 * format_type(oid, NULL) says, e.g. from pg_type when a Type message named a
 * domain by its base type). Overrides the built-in table and Type messages;
 * relations already cached pick it up. False when out of memory.
 */
bool pgo_set_type_name(struct pgo_decoder *d, uint32_t oid, const char *name);

/*
 * The `type` string a column of this OID and typmod gets, as wal2json prints
 * it (format_type() with the typmod; the outer quotes of a quoted name
 * dropped as wal2json's JSON leaves them). NULL for an OID nothing named.
 * Valid until the next call on d.
 */
const char *pgo_type_name(struct pgo_decoder *d, uint32_t oid, int32_t typmod);

/* Why the last call failed; valid until the next call. */
const char *pgo_errmsg(const struct pgo_decoder *d);

/*
 * True when the last pgo_decode() failed because an allocation failed
 * (pgo_errmsg() then says "out of memory"), not because of the message.
 */
bool pgo_out_of_memory(const struct pgo_decoder *d);

/*
 * Streaming (protocol version 2, `streaming 'on'`): the walsender sends a
 * large transaction while it decodes it, in blocks that Stream Start ('S')
 * and Stream Stop ('E') enclose, and ends it with Stream Commit ('c') or
 * Stream Abort ('A', of the whole transaction or of one subtransaction).
 * Transactions stream interleaved, block by block; one that is not streamed
 * comes as protocol 1 sends it (Begin .. Commit). Inside a block every
 * Relation, Type, Insert, Update, Delete, Truncate and Message carries the
 * xid of its (sub)transaction after its type byte; Origin does not.
 * pgo_decode() takes none of this: the relay holds each streamed transaction
 * until its Stream Commit and then decodes it as protocol 1 would have sent
 * it, through the helpers below (pure, like the decoder).
 */
enum pgo_stream_kind {
	PGO_NOT_STREAM,    /* any other message */
	PGO_STREAM_START,  /* xid, first */
	PGO_STREAM_STOP,   /* - */
	PGO_STREAM_COMMIT, /* xid, commit_lsn, end_lsn, commit_time */
	PGO_STREAM_ABORT,  /* xid, subxid (== xid: the whole transaction) */
};

struct pgo_stream_msg {
	enum pgo_stream_kind kind;
	uint32_t xid, subxid;
	bool first; /* Stream Start of the transaction's first block */
	lsn_t commit_lsn, end_lsn;
	int64_t commit_time;
};

/* What buf[0..len) is. False (and *err filled) when a stream message is malformed. */
bool pgo_stream_parse(const char *buf, size_t len, struct pgo_stream_msg *out, char *err,
                      size_t errlen);

/*
 * A message inside a stream block, made the protocol 1 message it stands
 * for: *xid is the (sub)transaction's (0 for an Origin, which has none) and
 * buf + *skip is the message without it (its type byte moved over the xid:
 * buf is changed). False when the message is too short to hold an xid.
 */
bool pgo_stream_unwrap(char *buf, size_t len, uint32_t *xid, size_t *skip);

/* The protocol 1 Begin (21 bytes) and Commit (26 bytes) of a streamed transaction. */
#define PGO_BEGIN_LEN 21
#define PGO_COMMIT_LEN 26
void pgo_stream_begin(const struct pgo_stream_msg *commit, char out[PGO_BEGIN_LEN]);
void pgo_stream_commit(const struct pgo_stream_msg *commit, char out[PGO_COMMIT_LEN]);

#endif
