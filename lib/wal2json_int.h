/*
 * wal2json_int.h - what lib/wal2json.c, wal2json_fast.c (the tokenizer) and
 * wal2json_object.c (w2j_decode_object's callbacks) share: the decoder's
 * state and its output helpers. Private to those three files.
 */
#ifndef RELAY_WAL2JSON_INT_H
#define RELAY_WAL2JSON_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#include "wal2json.h"

/* Marks an absent string in the offset records. */
#define NO_OFF ((size_t)-1)
/* A span whose off has this bit lies in the caller's buffer (w2j_decode_inplace). */
#define IN_INPUT ((size_t)1 << (sizeof(size_t) * 8 - 2))

/* Longest excerpt of offending input quoted in an error message. */
#define ERR_EXCERPT 48

/* Block cache for yajl's allocations (see pool_malloc()). */
#define POOL_SLOTS 16
#define POOL_KEEP_MAX ((size_t)64 * 1024)

/* Header in front of every block handed to yajl, keeping malloc alignment. */
union pool_hdr {
	size_t size; /* usable bytes after the header */
	max_align_t align;
};

struct pool {
	union pool_hdr *free[POOL_SLOTS];
	size_t nfree;
};

/* A string (or value) recorded during parsing as an arena range. */
struct span {
	size_t off; /* NO_OFF when absent */
	size_t len;
};

/* One column / object field while parsing. */
struct slot {
	struct span name;
	struct span type;
	struct span value;
	enum w2j_kind kind;
	bool has_name;
	bool has_value;
};

/* Top-level keys of a wal2json v2 object. */
enum topkey {
	K_OTHER = 0, /* unknown: value skipped */
	K_ACTION,
	K_XID,
	K_LSN,
	K_NEXTLSN,
	K_TIMESTAMP,
	K_SCHEMA,
	K_TABLE,
	K_COLUMNS,
	K_IDENTITY,
	K_TRANSACTIONAL,
	K_PREFIX,
	K_CONTENT,
	K_PK
};

/* Keys of one element of "columns". */
enum colkey {
	C_OTHER = 0, /* typeoid, position, optional, default, ...: ignored */
	C_NAME,
	C_TYPE,
	C_VALUE
};

struct w2j_decoder {
	/* Output storage, reused across calls. */
	char *arena;
	size_t arena_len;
	size_t arena_cap;
	struct slot *slots;
	size_t nslots;
	size_t slots_cap;
	struct w2j_field *fields;
	size_t fields_cap;
	char *scratch; /* private copy of input that lies inside the arena */
	size_t scratch_cap;
	char *unesc; /* the fast path's unescaped copy of one string */
	size_t unesc_cap;

	/*
	 * w2j_decode_inplace(): strings of W2J_INPLACE_MIN bytes or more stay in
	 * the caller's buffer. The fast path records them here; once the whole
	 * object parsed, their escapes are undone in place and they are NUL-
	 * terminated there (saving the buffer's first keep bytes before).
	 */
	char *input;        /* the caller's buffer, NULL when not in place */
	size_t inplace_min; /* W2J_INPLACE_MIN, or what tests set */
	struct big {
		size_t off;     /* content start in input */
		size_t raw_len; /* bytes between the quotes */
		size_t len;     /* after unescaping */
	} * bigs;
	size_t nbigs, bigs_cap;
	const unsigned char *big_ptr; /* the last big string handed to a callback */
	size_t big_len;
	char *saved; /* the first keep bytes of input before it changed */
	size_t saved_cap, saved_len;
	bool input_changed;
	bool yajl_only; /* w2j_set_fast_path(d, false): always parse with yajl */

	/* yajl */
	yajl_alloc_funcs afs;
	struct pool pool;
	yajl_gen gen; /* w2j_decode_object() only, created on first use */

	/*
	 * Parse state. depth counts open containers: 1 inside the top-level
	 * object, 2 inside "columns", 3 inside one column object. While
	 * skipping a container value, events are ignored until depth drops
	 * back to skip_base.
	 */
	int depth;
	bool skipping;
	int skip_base;
	enum topkey key;
	enum colkey ckey;
	bool failed;  /* a callback cancelled the parse; errmsg is set */
	bool oom;     /* the last call failed for lack of memory (w2j_out_of_memory) */
	bool gen_oom; /* the yajl_gen print callback ran out of memory */
	size_t gen_start;

	/* The change being decoded; strings as arena spans. */
	bool has_action;
	char action;
	bool has_xid;
	uint32_t xid;
	lsn_t lsn;
	lsn_t nextlsn;
	bool transactional;
	struct span timestamp;
	struct span schema;
	struct span table;
	struct span prefix;
	struct span content;

	char errmsg[256];
};

/* Record a printf-style error for w2j_errmsg(); always returns false. */
bool w2j_fail(struct w2j_decoder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* w2j_fail() for an allocation that failed; always returns false. */
bool w2j_oom(struct w2j_decoder *d);
/* Make room for need more arena bytes; false (with error set) on OOM. */
bool w2j_arena_reserve(struct w2j_decoder *d, size_t need);
/* Copy s[0..len) plus a NUL into the arena (or record a big string in place) as *sp. */
bool w2j_arena_put(struct w2j_decoder *d, const void *s, size_t len, struct span *sp);
/* Start a new slot (column or field); NULL (with error set) on OOM. */
struct slot *w2j_slot_new(struct w2j_decoder *d);
/* Record a scalar value into slot s. For NULL, s and len are ignored. */
bool w2j_slot_set_value(struct w2j_decoder *d, struct slot *s, enum w2j_kind kind, const void *v,
                        size_t len);

/*
 * The fast tokenizer (wal2json_fast.c): drives cb like yajl would over
 * buf[0..len). FAST_FALLBACK: it gave up on something unusual before any
 * callback could have changed the input; the caller resets and lets yajl
 * judge the same input.
 */
enum fast_result { FAST_OK, FAST_FAILED, FAST_FALLBACK };
enum fast_result w2j_fast_parse(struct w2j_decoder *d, const yajl_callbacks *cb, const char *buf,
                                size_t len);
/* Undo the escapes of a string the tokenizer checked, from p up to close, writing from o. */
size_t w2j_unescape_inplace(char *o, const char *p, const char *close);

/* w2j_decode_object()'s callbacks and yajl_gen print callback (wal2json_object.c). */
extern const yajl_callbacks w2j_object_callbacks;
void w2j_gen_print(void *ctx, const char *s, size_t len);

#endif
