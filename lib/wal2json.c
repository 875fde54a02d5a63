/*
 * wal2json.c - decoder for wal2json format-version 2 objects.
 *
 * Turns one XLogData payload (one JSON object) into a struct w2j_change with
 * yajl's callback parser: no document tree, numbers passed on as their exact
 * text. Pure: no I/O, no logging; failures leave a one-line message behind
 * for w2j_errmsg().
 *
 * Memory: every string handed out is copied into one growing arena owned by
 * the decoder (except, with w2j_decode_inplace(), the large ones, undone in
 * the caller's buffer). The tokenizer is wal2json_fast.c, the callbacks of
 * w2j_decode_object() wal2json_object.c; wal2json_int.h is what they share. While parsing, strings
 * are recorded as arena offsets (the arena may move when it grows) and turned into pointers once
 * the whole object has been parsed. Columns go through a growing array the same way. yajl 2.1
 * cannot reset a parser, so a handle is allocated per call; its memory comes from a small block
 * cache kept in the decoder, so that in steady state a call does no malloc at all.
 */
#include "wal2json.h"
#include "wal2json_int.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* A top-level key's name, for error messages. */
static const char *topkey_name(enum topkey k)
{
	switch (k) {
	case K_ACTION:
		return "action";
	case K_XID:
		return "xid";
	case K_LSN:
		return "lsn";
	case K_NEXTLSN:
		return "nextlsn";
	case K_TIMESTAMP:
		return "timestamp";
	case K_SCHEMA:
		return "schema";
	case K_TABLE:
		return "table";
	case K_COLUMNS:
		return "columns";
	case K_IDENTITY:
		return "identity";
	case K_TRANSACTIONAL:
		return "transactional";
	case K_PREFIX:
		return "prefix";
	case K_CONTENT:
		return "content";
	case K_PK:
		return "pk";
	case K_OTHER:
		break;
	}
	return "?";
}

/*
 * Block cache for yajl. Each call allocates a parser (handle, lexer, buffers,
 * state stack) and frees it again; the freed blocks are kept here and handed
 * out again best-fit, so the same sequence of requests on the next call is
 * served without malloc. Blocks larger than POOL_KEEP_MAX are not kept, so
 * one huge escaped string does not pin its buffer forever.
 */
static void *pool_malloc(void *ctx, size_t sz)
{
	struct pool *p = ctx;
	size_t best = POOL_SLOTS;
	union pool_hdr *h;

	for (size_t i = 0; i < p->nfree; i++) {
		if (p->free[i]->size >= sz &&
		    (best == POOL_SLOTS || p->free[i]->size < p->free[best]->size))
			best = i;
	}
	if (best != POOL_SLOTS) {
		h = p->free[best];
		p->free[best] = p->free[--p->nfree];
		return h + 1;
	}
	if (sz > SIZE_MAX - sizeof(*h))
		return NULL;
	h = malloc(sizeof(*h) + sz);
	if (!h)
		return NULL;
	h->size = sz;
	return h + 1;
}

static void pool_free(void *ctx, void *ptr)
{
	struct pool *p = ctx;
	union pool_hdr *h;

	if (!ptr)
		return;
	h = (union pool_hdr *)ptr - 1;
	if (p->nfree < POOL_SLOTS && h->size <= POOL_KEEP_MAX)
		p->free[p->nfree++] = h;
	else
		free(h);
}

static void *pool_realloc(void *ctx, void *ptr, size_t sz)
{
	union pool_hdr *h, *nh;

	if (!ptr)
		return pool_malloc(ctx, sz);
	h = (union pool_hdr *)ptr - 1;
	if (h->size >= sz)
		return ptr;
	if (sz > SIZE_MAX - sizeof(*h))
		return NULL;
	nh = realloc(h, sizeof(*nh) + sz);
	if (!nh)
		return NULL;
	nh->size = sz;
	return nh + 1;
}

static void pool_clear(struct pool *p)
{
	while (p->nfree > 0)
		free(p->free[--p->nfree]);
}

/* Record a printf-style error for w2j_errmsg(); always returns false. */
bool w2j_fail(struct w2j_decoder *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(d->errmsg, sizeof(d->errmsg), fmt, ap);
	va_end(ap);
	d->failed = true;
	return false;
}

/* w2j_fail() for an allocation that failed: w2j_out_of_memory() tells it apart. */
bool w2j_oom(struct w2j_decoder *d)
{
	d->oom = true;
	return w2j_fail(d, "out of memory");
}

/*
 * Render s[0..len) for quoting inside an error message: at most ERR_EXCERPT
 * bytes, control characters, '"' and '\\' replaced by '?', "..." appended
 * when cut. out must hold ERR_EXCERPT + 4 bytes.
 */
static const char *excerpt(char *out, const unsigned char *s, size_t len)
{
	size_t n = len > ERR_EXCERPT ? ERR_EXCERPT : len;

	/* do not cut a UTF-8 sequence in half */
	while (n < len && n > 0 && (s[n] & 0xc0) == 0x80)
		n--;
	for (size_t i = 0; i < n; i++)
		out[i] = (s[i] < 0x20 || s[i] == 0x7f || s[i] == '"' || s[i] == '\\') ? '?' : (char)s[i];
	if (n < len) {
		memcpy(out + n, "...", 4);
	} else {
		out[n] = '\0';
	}
	return out;
}

/* Make room for need more arena bytes; false (with error set) on OOM. */
bool w2j_arena_reserve(struct w2j_decoder *d, size_t need)
{
	size_t cap;
	char *n;

	if (need <= d->arena_cap - d->arena_len)
		return true;
	if (need > SIZE_MAX / 2 - d->arena_len)
		return w2j_oom(d);
	cap = d->arena_cap ? d->arena_cap : 1024;
	while (cap - d->arena_len < need)
		cap *= 2;
	n = realloc(d->arena, cap);
	if (!n)
		return w2j_oom(d);
	d->arena = n;
	d->arena_cap = cap;
	return true;
}

/* Copy s[0..len) plus a NUL into the arena and record its span in *sp. */
bool w2j_arena_put(struct w2j_decoder *d, const void *s, size_t len, struct span *sp)
{
	if (d->big_ptr && s == d->big_ptr && len == d->big_len) {
		/* A big string of the caller's buffer: recorded where it is. */
		sp->off = IN_INPUT | (size_t)((const char *)s - d->input);
		sp->len = len;
		return true;
	}
	if (!w2j_arena_reserve(d, len + 1))
		return false;
	sp->off = d->arena_len;
	sp->len = len;
	if (len)
		memcpy(d->arena + d->arena_len, s, len);
	d->arena[d->arena_len + len] = '\0';
	d->arena_len += len + 1;
	return true;
}

/* Pointer for a recorded span, NULL when absent. Only after parsing. */
static const char *span_ptr(const struct w2j_decoder *d, struct span sp)
{
	if (sp.off == NO_OFF)
		return NULL;
	return sp.off & IN_INPUT ? d->input + (sp.off & ~IN_INPUT) : d->arena + sp.off;
}

/* Start a new slot (column or field); NULL (with error set) on OOM. */
struct slot *w2j_slot_new(struct w2j_decoder *d)
{
	struct slot *s;

	if (d->nslots == d->slots_cap) {
		size_t cap = d->slots_cap ? d->slots_cap * 2 : 16;
		struct slot *n;

		if (cap > SIZE_MAX / sizeof(*n)) {
			w2j_oom(d);
			return NULL;
		}
		n = realloc(d->slots, cap * sizeof(*n));
		if (!n) {
			w2j_oom(d);
			return NULL;
		}
		d->slots = n;
		d->slots_cap = cap;
	}
	s = &d->slots[d->nslots++];
	s->name.off = NO_OFF;
	s->name.len = 0;
	s->type = s->name;
	s->value = s->name;
	s->kind = W2J_KIND_NULL;
	s->has_name = false;
	s->has_value = false;
	return s;
}

/* Record a scalar value into slot s. For NULL, s and len are ignored. */
bool w2j_slot_set_value(struct w2j_decoder *d, struct slot *s, enum w2j_kind kind, const void *v,
                        size_t len)
{
	s->kind = kind;
	s->has_value = true;
	if (kind == W2J_KIND_NULL) {
		s->value.off = NO_OFF;
		s->value.len = 0;
		return true;
	}
	return w2j_arena_put(d, v, len, &s->value);
}

/*
 * Turn the recorded slots into d->fields with real pointers into the arena.
 * Called once parsing is over, so the arena no longer moves.
 */
static bool build_fields(struct w2j_decoder *d)
{
	if (d->nslots > d->fields_cap) {
		struct w2j_field *n;

		if (d->nslots > SIZE_MAX / sizeof(*n))
			return w2j_oom(d);
		n = realloc(d->fields, d->nslots * sizeof(*n));
		if (!n)
			return w2j_oom(d);
		d->fields = n;
		d->fields_cap = d->nslots;
	}
	for (size_t i = 0; i < d->nslots; i++) {
		const struct slot *s = &d->slots[i];
		struct w2j_field *f = &d->fields[i];

		f->name = span_ptr(d, s->name);
		f->name_len = s->name.len;
		f->type = span_ptr(d, s->type);
		f->type_len = s->type.len;
		f->kind = s->kind;
		f->value = span_ptr(d, s->value);
		f->value_len = s->value.len;
	}
	return true;
}

/*
 * Input that lies inside the decoder's own arena (a message's "content" or a
 * jsonb column value passed straight back in) would be overwritten while the
 * arena is reused for this call's output: parse a private copy instead.
 */
static bool detach_input(struct w2j_decoder *d, const char **buf, size_t len)
{
	uintptr_t b = (uintptr_t)*buf, a = (uintptr_t)d->arena;

	if (!d->arena || !*buf || len == 0 || b < a || b >= a + d->arena_cap)
		return true;
	if (len > d->scratch_cap) {
		char *n = realloc(d->scratch, len);

		if (!n)
			return w2j_oom(d);
		d->scratch = n;
		d->scratch_cap = len;
	}
	memcpy(d->scratch, *buf, len);
	*buf = d->scratch;
	return true;
}

/* Reset per-call state; reserve arena room for a len-byte input. */
static bool begin_call(struct w2j_decoder *d, size_t len)
{
	static const struct span none = {NO_OFF, 0};

	d->arena_len = 0;
	d->nslots = 0;
	d->nbigs = 0;
	d->big_ptr = NULL;
	d->input_changed = false;
	d->depth = 0;
	d->skipping = false;
	d->skip_base = 0;
	d->key = K_OTHER;
	d->ckey = C_OTHER;
	d->failed = false;
	d->gen_oom = false;
	d->gen_start = 0;
	d->has_action = false;
	d->action = 0;
	d->has_xid = false;
	d->xid = 0;
	d->lsn = LSN_INVALID;
	d->nextlsn = LSN_INVALID;
	d->transactional = false;
	d->timestamp = none;
	d->schema = none;
	d->table = none;
	d->prefix = none;
	d->content = none;
	d->errmsg[0] = '\0';

	/*
	 * Unescaped strings plus their NULs never need more than the input
	 * (each string loses at least its two quotes), so one reservation
	 * usually covers the whole call; growing later is still safe.
	 */
	if (len == SIZE_MAX)
		return w2j_oom(d);
	/* In place, large strings stay in the input: the arena holds the rest. */
	return w2j_arena_reserve(d, d->input && len > W2J_INPLACE_MIN ? W2J_INPLACE_MIN : len + 1);
}

/*
 * Run yajl over buf[0..len) with the given callbacks. Returns false with
 * errmsg set when a callback cancelled or the JSON is malformed.
 */
static bool run_parser(struct w2j_decoder *d, const yajl_callbacks *cb, const char *buf, size_t len)
{
	yajl_handle h;
	yajl_status st;
	size_t at;
	unsigned char *msg;

	h = yajl_alloc(cb, &d->afs, d);
	if (!h)
		return w2j_oom(d);
	/*
	 * One value, no trailing garbage, no comments. Strings are not re-checked
	 * as UTF-8: PostgreSQL already guarantees valid text in the database
	 * encoding (which need not be UTF-8), and the check costs ~8% of decoding.
	 */
	yajl_config(h, yajl_dont_validate_strings, 1);
	st = yajl_parse(h, (const unsigned char *)buf, len);
	at = yajl_get_bytes_consumed(h);
	if (st == yajl_status_ok) {
		st = yajl_complete_parse(h);
		at = len; /* complete_parse only sees the end of input */
	}
	if (st == yajl_status_ok) {
		yajl_free(h);
		return true;
	}
	if (!d->failed) {
		msg = yajl_get_error(h, 0, (const unsigned char *)buf, len);
		if (msg) {
			size_t n = strlen((const char *)msg);

			/* one line, no final period: yajl adds "\n" and lexical errors a "." */
			while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == '.'))
				msg[--n] = '\0';
			w2j_fail(d, "invalid JSON at byte %zu: %s", at, (const char *)msg);
			yajl_free_error(h, msg);
		} else {
			w2j_fail(d, "invalid JSON at byte %zu", at);
		}
	}
	yajl_free(h);
	return false;
}

/* Parse with the fast path, and with yajl when it gives up. */
static bool parse(struct w2j_decoder *d, const yajl_callbacks *cb, const char *buf, size_t len)
{
	if (!d->yajl_only) {
		switch (w2j_fast_parse(d, cb, buf, len)) {
		case FAST_OK:
			return true;
		case FAST_FAILED:
			return false;
		case FAST_FALLBACK:
			break;
		}
		if (!begin_call(d, len)) /* forget what the callbacks saw */
			return false;
	}
	return run_parser(d, cb, buf, len);
}

/* --- w2j_decode() callbacks ------------------------------------------- */

static enum topkey classify_topkey(const unsigned char *k, size_t len)
{
	switch (len) {
	case 2:
		if (memcmp(k, "pk", 2) == 0)
			return K_PK;
		break;
	case 3:
		if (memcmp(k, "xid", 3) == 0)
			return K_XID;
		if (memcmp(k, "lsn", 3) == 0)
			return K_LSN;
		break;
	case 5:
		if (memcmp(k, "table", 5) == 0)
			return K_TABLE;
		break;
	case 6:
		if (memcmp(k, "action", 6) == 0)
			return K_ACTION;
		if (memcmp(k, "schema", 6) == 0)
			return K_SCHEMA;
		if (memcmp(k, "prefix", 6) == 0)
			return K_PREFIX;
		break;
	case 7:
		if (memcmp(k, "columns", 7) == 0)
			return K_COLUMNS;
		if (memcmp(k, "nextlsn", 7) == 0)
			return K_NEXTLSN;
		if (memcmp(k, "content", 7) == 0)
			return K_CONTENT;
		break;
	case 8:
		if (memcmp(k, "identity", 8) == 0)
			return K_IDENTITY;
		break;
	case 9:
		if (memcmp(k, "timestamp", 9) == 0)
			return K_TIMESTAMP;
		break;
	case 13:
		if (memcmp(k, "transactional", 13) == 0)
			return K_TRANSACTIONAL;
		break;
	}
	return K_OTHER;
}

static enum colkey classify_colkey(const unsigned char *k, size_t len)
{
	switch (len) {
	case 4:
		if (memcmp(k, "name", 4) == 0)
			return C_NAME;
		if (memcmp(k, "type", 4) == 0)
			return C_TYPE;
		break;
	case 5:
		if (memcmp(k, "value", 5) == 0)
			return C_VALUE;
		break;
	}
	return C_OTHER;
}

/* The JSON type of a scalar, for "... is not a ..." messages. */
static const char *kind_article(enum w2j_kind kind)
{
	switch (kind) {
	case W2J_KIND_NULL:
		return "null";
	case W2J_KIND_STRING:
		return "a string";
	case W2J_KIND_NUMBER:
		return "a number";
	case W2J_KIND_BOOL:
		return "a boolean";
	case W2J_KIND_JSON:
		break;
	}
	return "an object or array";
}

/* Start skipping the container value that is being opened. */
static int skip_container(struct w2j_decoder *d)
{
	d->skipping = true;
	d->skip_base = d->depth;
	d->depth++;
	return 1;
}

/* Parse a JSON number's text as a transaction id. */
static bool parse_xid(const unsigned char *s, size_t len, uint32_t *ret)
{
	uint64_t v = 0;

	if (len == 0 || len > 10)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > UINT32_MAX)
		return false;
	*ret = (uint32_t)v;
	return true;
}

/* A scalar value of top-level key d->key. */
static int top_scalar(struct w2j_decoder *d, enum w2j_kind kind, const unsigned char *s, size_t len)
{
	char ex[ERR_EXCERPT + 4];
	const char *kname = topkey_name(d->key);
	lsn_t lsn;

	switch (d->key) {
	case K_OTHER:
	case K_IDENTITY:
	case K_PK:
		return 1;
	case K_ACTION:
		if (kind != W2J_KIND_STRING)
			return w2j_fail(d, "\"action\" is %s, not a string", kind_article(kind));
		if (len != 1 || !memchr("BCIUDTM", s[0], 7))
			return w2j_fail(d, "unknown action \"%s\"", excerpt(ex, s, len));
		d->has_action = true;
		d->action = (char)s[0];
		return 1;
	case K_XID:
		if (kind == W2J_KIND_NULL) {
			d->has_xid = false;
			return 1;
		}
		if (kind != W2J_KIND_NUMBER || !parse_xid(s, len, &d->xid))
			return w2j_fail(d, "invalid \"xid\" value \"%s\"", excerpt(ex, s, len));
		d->has_xid = true;
		return 1;
	case K_LSN:
	case K_NEXTLSN:
		if (kind != W2J_KIND_STRING)
			return w2j_fail(d, "\"%s\" is %s, not a string", kname, kind_article(kind));
		if (!lsn_parse((const char *)s, len, &lsn))
			return w2j_fail(d, "invalid \"%s\" value \"%s\"", kname, excerpt(ex, s, len));
		if (d->key == K_LSN)
			d->lsn = lsn;
		else
			d->nextlsn = lsn;
		return 1;
	case K_TIMESTAMP:
		if (kind == W2J_KIND_NULL) {
			d->timestamp.off = NO_OFF;
			d->timestamp.len = 0;
			return 1;
		}
		if (kind != W2J_KIND_STRING)
			return w2j_fail(d, "\"%s\" is %s, not a string", kname, kind_article(kind));
		return w2j_arena_put(d, s, len, &d->timestamp);
	case K_SCHEMA:
	case K_TABLE:
	case K_PREFIX:
	case K_CONTENT:
		if (kind != W2J_KIND_STRING)
			return w2j_fail(d, "\"%s\" is %s, not a string", kname, kind_article(kind));
		return w2j_arena_put(d, s, len,
		                     d->key == K_SCHEMA   ? &d->schema
		                     : d->key == K_TABLE  ? &d->table
		                     : d->key == K_PREFIX ? &d->prefix
		                                          : &d->content);
	case K_COLUMNS:
		return w2j_fail(d, "\"columns\" is not an array");
	case K_TRANSACTIONAL:
		if (kind != W2J_KIND_BOOL)
			return w2j_fail(d, "\"transactional\" is %s, not a boolean", kind_article(kind));
		d->transactional = s[0] == 't';
		return 1;
	}
	return 1;
}

/* A scalar value of key d->ckey inside the current column object. */
static int col_scalar(struct w2j_decoder *d, enum w2j_kind kind, const unsigned char *s, size_t len)
{
	struct slot *c = &d->slots[d->nslots - 1];

	switch (d->ckey) {
	case C_OTHER:
		return 1;
	case C_NAME:
		if (kind != W2J_KIND_STRING)
			return w2j_fail(d, "column \"name\" is %s, not a string", kind_article(kind));
		c->has_name = true;
		return w2j_arena_put(d, s, len, &c->name);
	case C_TYPE:
		if (kind == W2J_KIND_NULL) {
			c->type.off = NO_OFF;
			c->type.len = 0;
			return 1;
		}
		if (kind != W2J_KIND_STRING)
			return w2j_fail(d, "column \"type\" is %s, not a string", kind_article(kind));
		return w2j_arena_put(d, s, len, &c->type);
	case C_VALUE:
		return w2j_slot_set_value(d, c, kind, s, len);
	}
	return 1;
}

/* Dispatch a scalar according to where the parser is. */
static int dec_scalar(struct w2j_decoder *d, enum w2j_kind kind, const unsigned char *s, size_t len)
{
	if (d->skipping)
		return 1;
	switch (d->depth) {
	case 0:
		return w2j_fail(d, "JSON text is not an object");
	case 1:
		return top_scalar(d, kind, s, len);
	case 2:
		return w2j_fail(d, "\"columns\" element is not an object");
	default:
		return col_scalar(d, kind, s, len);
	}
}

static int dec_null(void *ctx)
{
	return dec_scalar(ctx, W2J_KIND_NULL, NULL, 0);
}

static int dec_boolean(void *ctx, int b)
{
	return b ? dec_scalar(ctx, W2J_KIND_BOOL, (const unsigned char *)"true", 4)
	         : dec_scalar(ctx, W2J_KIND_BOOL, (const unsigned char *)"false", 5);
}

static int dec_number(void *ctx, const char *s, size_t len)
{
	return dec_scalar(ctx, W2J_KIND_NUMBER, (const unsigned char *)s, len);
}

static int dec_string(void *ctx, const unsigned char *s, size_t len)
{
	return dec_scalar(ctx, W2J_KIND_STRING, s, len);
}

/* An object or array opens; is_array tells which. */
static int dec_open(struct w2j_decoder *d, bool is_array)
{
	if (d->skipping) {
		d->depth++;
		return 1;
	}
	switch (d->depth) {
	case 0:
		if (is_array)
			return w2j_fail(d, "JSON text is not an object");
		d->depth = 1;
		return 1;
	case 1:
		switch (d->key) {
		case K_OTHER:
		case K_IDENTITY:
		case K_PK:
			return skip_container(d);
		case K_COLUMNS:
			if (!is_array)
				return w2j_fail(d, "\"columns\" is not an array");
			d->nslots = 0; /* a repeated key replaces the earlier one */
			d->depth = 2;
			return 1;
		default:
			return w2j_fail(d, "\"%s\" is an object or array", topkey_name(d->key));
		}
	case 2:
		if (is_array)
			return w2j_fail(d, "\"columns\" element is not an object");
		if (!w2j_slot_new(d))
			return 0;
		d->ckey = C_OTHER;
		d->depth = 3;
		return 1;
	default:
		switch (d->ckey) {
		case C_OTHER:
			return skip_container(d);
		case C_VALUE:
			return w2j_fail(d, "column value is an object or array");
		default:
			return w2j_fail(d, "column \"%s\" is an object or array",
			                d->ckey == C_NAME ? "name" : "type");
		}
	}
}

static int dec_start_map(void *ctx)
{
	return dec_open(ctx, false);
}

static int dec_start_array(void *ctx)
{
	return dec_open(ctx, true);
}

/* An object or array closes (yajl has already matched the brackets). */
static int dec_close(void *ctx)
{
	struct w2j_decoder *d = ctx;
	char ex[ERR_EXCERPT + 4];

	d->depth--;
	if (d->skipping) {
		if (d->depth == d->skip_base)
			d->skipping = false;
		return 1;
	}
	if (d->depth == 2) {
		const struct slot *c = &d->slots[d->nslots - 1];

		if (!c->has_name)
			return w2j_fail(d, "column without \"name\"");
		if (!c->has_value)
			return w2j_fail(d, "column \"%s\" without \"value\"",
			                excerpt(ex, (const unsigned char *)span_ptr(d, c->name), c->name.len));
	}
	return 1;
}

static int dec_map_key(void *ctx, const unsigned char *k, size_t len)
{
	struct w2j_decoder *d = ctx;

	if (d->skipping)
		return 1;
	if (d->depth == 1)
		d->key = classify_topkey(k, len);
	else
		d->ckey = classify_colkey(k, len);
	return 1;
}

static const yajl_callbacks decode_callbacks = {
    .yajl_null = dec_null,
    .yajl_boolean = dec_boolean,
    .yajl_number = dec_number,
    .yajl_string = dec_string,
    .yajl_start_map = dec_start_map,
    .yajl_map_key = dec_map_key,
    .yajl_end_map = dec_close,
    .yajl_start_array = dec_start_array,
    .yajl_end_array = dec_close,
};

/* --- public API ------------------------------------------------------- */

/*
 * Create a decoder. Returns NULL when out of memory. Free with
 * w2j_destroy().
 */
struct w2j_decoder *w2j_create(void)
{
	struct w2j_decoder *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->afs.malloc = pool_malloc;
	d->afs.realloc = pool_realloc;
	d->afs.free = pool_free;
	d->afs.ctx = &d->pool;
	d->inplace_min = W2J_INPLACE_MIN;
	return d;
}

/* Free a decoder and everything it handed out. NULL is a no-op. */
void w2j_destroy(struct w2j_decoder *d)
{
	if (!d)
		return;
	if (d->gen)
		yajl_gen_free(d->gen);
	pool_clear(&d->pool);
	free(d->scratch);
	free(d->bigs);
	free(d->saved);
	free(d->unesc);
	free(d->fields);
	free(d->slots);
	free(d->arena);
	free(d);
}

/*
 * Decode one wal2json v2 object (see wal2json.h). On success fills *ret,
 * whose pointers stay valid until the next call on d. On failure *ret is
 * left untouched and w2j_errmsg() describes the problem. buf may point into
 * d's own output from the previous call.
 */
bool w2j_decode(struct w2j_decoder *d, const char *buf, size_t len, struct w2j_change *ret)
{
	d->oom = false;
	if (!detach_input(d, &buf, len) || !begin_call(d, len))
		return false;
	if (!parse(d, &decode_callbacks, buf, len))
		return false;
	if (!d->has_action)
		return w2j_fail(d, "missing \"action\"");
	if (!build_fields(d))
		return false;

	ret->action = (enum w2j_action)d->action;
	ret->has_xid = d->has_xid;
	ret->xid = d->has_xid ? d->xid : 0;
	ret->lsn = d->lsn;
	ret->nextlsn = d->nextlsn;
	ret->timestamp = span_ptr(d, d->timestamp);
	ret->timestamp_len = d->timestamp.len;
	ret->schema = span_ptr(d, d->schema);
	ret->schema_len = d->schema.len;
	ret->table = span_ptr(d, d->table);
	ret->table_len = d->table.len;
	ret->columns = d->nslots ? d->fields : NULL;
	ret->ncolumns = d->nslots;
	ret->transactional = d->transactional;
	ret->prefix = span_ptr(d, d->prefix);
	ret->prefix_len = d->prefix.len;
	ret->content = span_ptr(d, d->content);
	ret->content_len = d->content.len;
	return true;
}

bool w2j_decode_inplace(struct w2j_decoder *d, char *buf, size_t len, size_t keep,
                        struct w2j_change *ret)
{
	bool ok;

	d->input = buf;
	ok = w2j_decode(d, buf, len, ret);
	d->input = NULL;
	if (!ok || d->nbigs == 0)
		return ok;
	d->saved_len = len < keep ? len : keep;
	if (d->saved_len > d->saved_cap) {
		char *n = realloc(d->saved, d->saved_len);

		if (!n)
			return w2j_oom(d);
		d->saved = n;
		d->saved_cap = d->saved_len;
	}
	memcpy(d->saved, buf, d->saved_len);
	d->input_changed = true;
	for (size_t i = 0; i < d->nbigs; i++) {
		const struct big *b = &d->bigs[i];

		if (b->len != b->raw_len)
			(void)w2j_unescape_inplace(buf + b->off, buf + b->off, buf + b->off + b->raw_len);
		buf[b->off + b->len] = '\0';
	}
	return true;
}

const char *w2j_original(const struct w2j_decoder *d, size_t *len)
{
	if (!d->input_changed)
		return NULL;
	*len = d->saved_len;
	return d->saved;
}

/*
 * Decode a flat JSON object into fields in document order (see wal2json.h).
 * On success writes *ret_fields and *ret_nfields, valid until the next call on
 * d; on failure writes neither and w2j_errmsg() says why. buf may point into
 * d's own output (e.g. the "content" of the change just decoded).
 */
bool w2j_decode_object(struct w2j_decoder *d, const char *buf, size_t len,
                       struct w2j_field **ret_fields, size_t *ret_nfields)
{
	d->oom = false;
	if (!detach_input(d, &buf, len) || !begin_call(d, len))
		return false;
	if (!d->gen) {
		d->gen = yajl_gen_alloc(NULL);
		if (!d->gen)
			return w2j_oom(d);
		/* compact output straight into the arena */
		if (!yajl_gen_config(d->gen, yajl_gen_print_callback, w2j_gen_print, (void *)d))
			return w2j_fail(d, "could not configure JSON generator");
	}
	if (!parse(d, &w2j_object_callbacks, buf, len))
		return false;
	if (!build_fields(d))
		return false;
	*ret_fields = d->nslots ? d->fields : NULL;
	*ret_nfields = d->nslots;
	return true;
}

/* Why the last call failed ("" after a success); valid until the next call. */
void w2j_set_inplace_min(struct w2j_decoder *d, size_t n)
{
	d->inplace_min = n ? n : 1;
}

void w2j_set_fast_path(struct w2j_decoder *d, bool on)
{
	d->yajl_only = !on;
}

const char *w2j_errmsg(const struct w2j_decoder *d)
{
	return d->errmsg;
}

bool w2j_out_of_memory(const struct w2j_decoder *d)
{
	return d->oom;
}

size_t w2j_held_bytes(const struct w2j_decoder *d)
{
	return d->arena_cap + d->slots_cap * sizeof(*d->slots) + d->fields_cap * sizeof(*d->fields) +
	       d->scratch_cap + d->unesc_cap + d->bigs_cap * sizeof(*d->bigs) + d->saved_cap;
}

/*
 * True when buf[0..len) is exactly one valid JSON value (UTF-8 checked).
 * Stateless: it touches no decoder, so pointers from earlier calls stay valid.
 */
bool w2j_json_valid(const char *buf, size_t len)
{
	static const yajl_callbacks none = {0};
	yajl_handle h = yajl_alloc(&none, NULL, NULL);
	yajl_status st;

	if (!h)
		return false;
	st = yajl_parse(h, (const unsigned char *)buf, len);
	if (st == yajl_status_ok)
		st = yajl_complete_parse(h);
	yajl_free(h);
	return st == yajl_status_ok;
}
