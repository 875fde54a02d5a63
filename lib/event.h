/*
 * event.h - mapping decoded outbox rows and logical messages to stream
 * events, and rendering stream names from templates.
 *
 * An event is what one call of the Redis function publishes: a stream name,
 * the event id (for the dedup window), the position (commit LSN, index in
 * transaction) for the replay watermark, and the entry's field/value pairs
 * in a stable order: the row's non-null columns in table order (or the
 * message object's keys in document order), then _lsn, _xid, _committed_at.
 *
 * Ownership: pointers inside a struct event point into the w2j_field array it
 * was mapped from and into the mapper's scratch space; they stay valid until
 * the next mapper_* call or until the decoder is reused, whichever is first.
 */
#ifndef RELAY_EVENT_H
#define RELAY_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "lsn.h"
#include "metrics.h"
#include "wal2json.h"

/* Longest stream name accepted; longer ones are dead-lettered. */
#define STREAM_NAME_MAX 512

/*
 * Most fields one event may have: its non-null columns (or the message
 * object's keys) plus _lsn, _xid and _committed_at. The Redis function hands
 * an entry's field/value pairs to XADD through Lua's unpack(), which fails
 * beyond about 8,000 values (4,000 fields); an event over the limit is
 * dead-lettered instead. 2000 is above PostgreSQL's 1600 columns per table,
 * so only a logical message can reach it.
 */
#define EVENT_MAX_FIELDS 2000

/*
 * Most bytes of the raw wal2json object a dead-letter entry carries. A longer
 * one is cut to this many bytes (less, to end on a UTF-8 character boundary)
 * and the entry gets raw_truncated "true" and raw_bytes (the original size):
 * the entry must stay well below Redis's proto-max-bulk-len (512 MB by
 * default, 1 MB at least) whatever the row was.
 */
#define DEAD_RAW_MAX 65536

struct event_field {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

struct event {
	const char *stream;
	size_t stream_len;
	const char *id; /* NULL: no dedup (dead letters) */
	size_t id_len;
	lsn_t commit_lsn;
	uint32_t index; /* position of the event inside its transaction */
	const struct event_field *fields;
	size_t nfields;
	enum dead_reason dead_reason; /* why, for a dead-letter event */
	int64_t committed_unix_us;    /* commit time (0: unknown), for latency metrics */
};

/* What the relay knows about the transaction an event belongs to. */
struct txn_info {
	lsn_t commit_lsn; /* commit record end (B's "nextlsn") */
	bool has_xid;
	uint32_t xid;
	const char *committed_at; /* wal2json commit timestamp text, may be NULL */
	size_t committed_at_len;
	int64_t committed_unix_us; /* the same, parsed; 0 when unknown */
};

/* Compiled stream template: "outbox:{aggregate_type}"; "{{" and "}}" are literal braces. */
struct stream_tmpl;

/*
 * Compile spec. Returns NULL and writes a one-line reason to err on an
 * unbalanced brace, an empty placeholder, or an empty template.
 */
struct stream_tmpl *stream_tmpl_compile(const char *spec, char *err, size_t errlen);
void stream_tmpl_free(struct stream_tmpl *t); /* NULL is a no-op */
/* The columns the template's placeholders name, in order (i < ncolumns). */
size_t stream_tmpl_ncolumns(const struct stream_tmpl *t);
const char *stream_tmpl_column(const struct stream_tmpl *t, size_t i);

/* True when the template has no placeholders (a fixed stream name). */
bool stream_tmpl_is_fixed(const struct stream_tmpl *t);

/*
 * Render t over fields into out (replacing its content). Returns false and
 * sets *reason (a static or out-owned string) when a placeholder's column is
 * absent or NULL, holds a control byte (see stream_name_check), or the result
 * is empty, longer than STREAM_NAME_MAX, or cannot carry a cluster hash tag
 * (see stream_hash_tag).
 */
struct buf;
bool stream_tmpl_render(const struct stream_tmpl *t, const struct w2j_field *fields, size_t n,
                        struct buf *out, const char **reason);

/*
 * The hash tag that auxiliary keys of stream s[0..len) must carry so they
 * hash to the same Redis Cluster slot as s: s's own {tag} if it has a valid
 * one, otherwise s itself. Writes "{...}" into out. Returns false when s has
 * no valid tag but contains '}' (no auxiliary key could match its slot).
 */
bool stream_hash_tag(const char *s, size_t len, struct buf *out);

/*
 * Append to out the base of the name of one of the relay's auxiliary keys
 * for stream s[0..len): "<prefix>:<kind>:{tag}" followed, when the stream
 * carries a hash tag of its own and per_stream is set, by "#<len>:<stream>",
 * so that streams sharing a tag ("{orders}:a", "{orders}:b") keep keys of
 * their own in the stream's cluster slot. The watermark is this base +
 * ":<slot>" (kind "wm"); per_stream false gives the pre-0.2 per-tag key.
 * tag is scratch space. Returns false when s cannot carry a hash tag.
 */
bool stream_key_base(struct buf *out, const char *prefix, const char *kind, const char *s,
                     size_t len, bool per_stream, struct buf *tag);

/* Index of the first control byte (below 0x20, or 0x7f) in s[0..len), or len if none. */
size_t stream_name_ctrl(const char *s, size_t len);

/*
 * Whether s[0..len) can be a stream name: not empty, at most STREAM_NAME_MAX
 * bytes, no control byte (it would cut or corrupt /metrics labels, log lines
 * and C-string consumers), and able to carry a hash tag (stream_hash_tag).
 * Returns NULL when it can, else a static one-line reason ("contains ...").
 */
const char *stream_name_check(const char *s, size_t len);

struct mapper;

struct mapper *mapper_create(const struct relay_config *cf, char *err, size_t errlen);
void mapper_destroy(struct mapper *m); /* NULL is a no-op */

enum map_result {
	MAP_EVENT = 0,  /* *ret is an event for its routed stream */
	MAP_DEAD_LETTER /* *ret is a dead-letter event; *reason says why */
};

/*
 * Map one outbox row (columns of an INSERT) or one message object (its keys)
 * to an event. raw/rawlen is the original wal2json object, carried into a
 * dead-letter entry (at most DEAD_RAW_MAX bytes of it) when the row cannot be
 * mapped: id problems, routing problems, text payload/headers not JSON, or
 * more than EVENT_MAX_FIELDS fields (DEAD_TOO_LARGE).
 */
enum map_result mapper_map(struct mapper *m, const struct txn_info *tx, uint32_t index,
                           const struct w2j_field *fields, size_t nfields, const char *raw,
                           size_t rawlen, struct event *ret, const char **reason);

/*
 * Build a dead-letter event for raw with the given reason. Every dead letter
 * is built here, so the DEAD_RAW_MAX cap on raw holds for all of them.
 */
void mapper_dead_letter(struct mapper *m, const struct txn_info *tx, uint32_t index,
                        enum dead_reason kind, const char *reason, const char *raw, size_t rawlen,
                        struct event *ret);

/* True once the mapper ran out of memory; it then cannot produce events. */
bool mapper_failed(const struct mapper *m);

#endif
