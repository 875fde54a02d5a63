/*
 * wal2json.h - decoder for wal2json format-version 2 objects.
 *
 * Pure: no I/O, no logging. Each XLogData payload of a wal2json v2 stream is
 * exactly one JSON object; w2j_decode() turns one into a struct w2j_change.
 * Callback-driven (a fast tokenizer of its own for what wal2json prints, yajl
 * for everything else), so no document tree is built and numbers keep their
 * exact text (numeric scale, values beyond 64 bits).
 *
 * Ownership: every pointer inside a w2j_change (and inside the fields of
 * w2j_decode_object) points into memory owned by the decoder and stays valid
 * until the next w2j_decode()/w2j_decode_object() call on the same decoder,
 * or w2j_destroy(). Strings are NUL-terminated as well as length-counted.
 */
#ifndef RELAY_WAL2JSON_H
#define RELAY_WAL2JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lsn.h"

enum w2j_action {
	W2J_BEGIN = 'B',
	W2J_COMMIT = 'C',
	W2J_INSERT = 'I',
	W2J_UPDATE = 'U',
	W2J_DELETE = 'D',
	W2J_TRUNCATE = 'T',
	W2J_MESSAGE = 'M'
};

/* How a value appeared in the JSON text. */
enum w2j_kind {
	W2J_KIND_NULL = 0, /* JSON null: value is NULL, len 0 */
	W2J_KIND_STRING,   /* JSON string: value is the unescaped content */
	W2J_KIND_NUMBER,   /* JSON number: value is its exact text, e.g. "12.5000" */
	W2J_KIND_BOOL,     /* JSON true/false: value is "true" or "false" */
	W2J_KIND_JSON      /* object or array (w2j_decode_object only): compact JSON text */
};

struct w2j_field {
	const char *name; /* column name, or object key */
	size_t name_len;
	const char *type; /* wal2json "type" (e.g. "jsonb", "numeric(12,4)"); NULL when absent */
	size_t type_len;
	enum w2j_kind kind;
	const char *value; /* see enum w2j_kind; NULL for W2J_KIND_NULL */
	size_t value_len;
};

struct w2j_change {
	enum w2j_action action;
	bool has_xid; /* "xid" present and not null */
	uint32_t xid;
	lsn_t lsn;             /* "lsn", LSN_INVALID when absent */
	lsn_t nextlsn;         /* "nextlsn" (B and C only), LSN_INVALID when absent */
	const char *timestamp; /* "timestamp" text, NULL when absent or null */
	size_t timestamp_len;
	const char *schema; /* I/U/D/T; NULL otherwise */
	size_t schema_len;
	const char *table; /* I/U/D/T; NULL otherwise */
	size_t table_len;
	struct w2j_field *columns; /* "columns" (new tuple) in wal2json order; "identity" is skipped */
	size_t ncolumns;
	bool transactional; /* M only */
	const char *prefix; /* M only */
	size_t prefix_len;
	const char *content; /* M only, unescaped */
	size_t content_len;
};

struct w2j_decoder;

struct w2j_decoder *w2j_create(void);
void w2j_destroy(struct w2j_decoder *d); /* NULL is a no-op */

/*
 * Decode one wal2json v2 object from buf[0..len). Returns true and fills *ret
 * on success. Returns false on malformed JSON, a missing or unknown "action",
 * an unparsable "lsn"/"nextlsn"/"xid", or a structure that is not wal2json v2;
 * w2j_errmsg() then says what was wrong (with a byte offset for JSON errors).
 * Unknown keys are ignored so newer wal2json versions keep working.
 */
bool w2j_decode(struct w2j_decoder *d, const char *buf, size_t len, struct w2j_change *ret);

/*
 * w2j_decode() for a buffer the caller owns and lets the decoder change:
 * string values of W2J_INPLACE_MIN bytes or more are not copied but undone
 * in place (unescaping never lengthens) and NUL-terminated there, so the
 * returned pointers to them point into buf and stay valid as long as buf.
 * Only once the whole object parsed is buf changed; before that its first
 * keep bytes are saved, for w2j_original(). A large row so costs no memory
 * beyond its own buffer.
 */
#define W2J_INPLACE_MIN (64 * 1024)
bool w2j_decode_inplace(struct w2j_decoder *d, char *buf, size_t len, size_t keep,
                        struct w2j_change *ret);

/*
 * After w2j_decode_inplace() changed its buffer: the first bytes the buffer
 * had (at most keep) and their count. NULL when the last call changed nothing.
 */
const char *w2j_original(const struct w2j_decoder *d, size_t *len);

/*
 * Decode a flat JSON object (a logical message's content) into fields, one per
 * key in document order. Scalars follow enum w2j_kind; nested objects/arrays
 * come back as W2J_KIND_JSON with compact JSON text. type is NULL.
 * Returns false when buf is not a single JSON object (w2j_errmsg() says why).
 * Invalidates pointers returned by the previous w2j_decode() on d.
 */
bool w2j_decode_object(struct w2j_decoder *d, const char *buf, size_t len,
                       struct w2j_field **ret_fields, size_t *ret_nfields);

/* True when buf[0..len) is exactly one valid JSON value; touches no decoder. */
bool w2j_json_valid(const char *buf, size_t len);

/*
 * w2j_decode() and w2j_decode_object() tokenize with a fast path of their own and hand anything
 * unusual to yajl. Off (false), yajl parses everything: for tests that
 * compare the two, and for profiling.
 */
void w2j_set_fast_path(struct w2j_decoder *d, bool on);

/* The size from which w2j_decode_inplace() leaves a string in place (tests: small sizes). */
void w2j_set_inplace_min(struct w2j_decoder *d, size_t n);

/* Why the last call failed; valid until the next call. */
const char *w2j_errmsg(const struct w2j_decoder *d);

/*
 * True when the last w2j_decode(), w2j_decode_inplace() or
 * w2j_decode_object() failed because an allocation failed (w2j_errmsg()
 * then says "out of memory"): not the input's fault, so not a reason to
 * reject it.
 */
bool w2j_out_of_memory(const struct w2j_decoder *d);

/* The bytes the decoder keeps allocated between calls (its arena and buffers; not yajl's). */
size_t w2j_held_bytes(const struct w2j_decoder *d);

#endif
