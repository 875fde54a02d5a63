/*
 * consumer_render.c - outbox-consume's rendering: one stream entry as one
 * JSON line (consumer_fmt_line(), see consumer_render.h), with yajl.
 *
 * Pure: no I/O, no logging; unit-tested (tests/unit/test_consumer.c).
 * "payload" and "headers" values that are one JSON text are embedded,
 * re-encoded compactly with numbers kept digit for digit; everything else is
 * a JSON string, invalid UTF-8 repaired byte by byte to U+FFFD.
 */
#include "consumer_render.h"

#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#include "buf.h"

/* JSON candidates beyond this ordinal in one entry are always strings. */
#define MAX_JSON_FIELDS 32

struct consumer_fmt {
	yajl_gen g;
	struct buf tmp; /* UTF-8-repaired copies of strings */
};

/* See consumer.h. */
bool consumer_is_json_field(const char *name, size_t len)
{
	return (len == 7 && memcmp(name, "payload", 7) == 0) ||
	       (len == 7 && memcmp(name, "headers", 7) == 0);
}

/* See consumer.h. */
struct consumer_fmt *consumer_fmt_create(void)
{
	struct consumer_fmt *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->g = yajl_gen_alloc(NULL);
	if (!f->g) {
		free(f);
		return NULL;
	}
	(void)yajl_gen_config(f->g, yajl_gen_beautify, 0);
	/* Belt and braces: gen_string() already hands over valid UTF-8 only. */
	(void)yajl_gen_config(f->g, yajl_gen_validate_utf8, 1);
	return f;
}

/* See consumer.h. */
void consumer_fmt_destroy(struct consumer_fmt *f)
{
	if (!f)
		return;
	yajl_gen_free(f->g);
	buf_finish(&f->tmp);
	free(f);
}

/*
 * Length of the well-formed UTF-8 sequence at s[0..n), or 0 when there is
 * none: stray continuation bytes, overlong forms, surrogates (U+D800..DFFF)
 * and code points above U+10FFFF are all rejected (RFC 3629).
 */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t need;

	if (c < 0x80)
		return 1;
	if (c < 0xC2) /* continuation byte, or C0/C1 (overlong 2-byte form) */
		return 0;
	if (c < 0xE0)
		need = 2;
	else if (c < 0xF0)
		need = 3;
	else if (c < 0xF5)
		need = 4;
	else
		return 0;
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	}
	if (c == 0xE0 && s[1] < 0xA0) /* overlong 3-byte form */
		return 0;
	if (c == 0xED && s[1] >= 0xA0) /* UTF-16 surrogate */
		return 0;
	if (c == 0xF0 && s[1] < 0x90) /* overlong 4-byte form */
		return 0;
	if (c == 0xF4 && s[1] >= 0x90) /* above U+10FFFF */
		return 0;
	return need;
}

/*
 * Emit s[0..len) as a JSON string. Invalid UTF-8 is repaired first (each
 * offending byte becomes U+FFFD) in f->tmp. False on a generator error or
 * when out of memory.
 */
static bool gen_string(struct consumer_fmt *f, const void *str, size_t len)
{
	static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
	const unsigned char *s = str;
	size_t i = 0, k;

	while (i < len && (k = utf8_seq_len(s + i, len - i)) > 0)
		i += k;
	if (i == len)
		return yajl_gen_string(f->g, s, len) == yajl_gen_status_ok;

	buf_reset(&f->tmp);
	buf_append(&f->tmp, s, i);
	while (i < len) {
		k = utf8_seq_len(s + i, len - i);
		if (k > 0) {
			buf_append(&f->tmp, s + i, k);
			i += k;
		} else {
			buf_append(&f->tmp, replacement, 3);
			i++;
		}
	}
	if (f->tmp.failed)
		return false;
	return yajl_gen_string(f->g, (const unsigned char *)f->tmp.data, f->tmp.len) ==
	       yajl_gen_status_ok;
}

/* yajl_parse callbacks copying a JSON text into the generator (ctx: the fmt). */
static int cb_null(void *ctx)
{
	return yajl_gen_null(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_boolean(void *ctx, int value)
{
	return yajl_gen_bool(((struct consumer_fmt *)ctx)->g, value) == yajl_gen_status_ok;
}

/* Numbers arrive as their text and are copied digit for digit. */
static int cb_number(void *ctx, const char *s, size_t len)
{
	return yajl_gen_number(((struct consumer_fmt *)ctx)->g, s, len) == yajl_gen_status_ok;
}

static int cb_string(void *ctx, const unsigned char *s, size_t len)
{
	return gen_string(ctx, s, len);
}

static int cb_start_map(void *ctx)
{
	return yajl_gen_map_open(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_end_map(void *ctx)
{
	return yajl_gen_map_close(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_start_array(void *ctx)
{
	return yajl_gen_array_open(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static int cb_end_array(void *ctx)
{
	return yajl_gen_array_close(((struct consumer_fmt *)ctx)->g) == yajl_gen_status_ok;
}

static const yajl_callbacks embed_callbacks = {
    .yajl_null = cb_null,
    .yajl_boolean = cb_boolean,
    .yajl_number = cb_number,
    .yajl_string = cb_string,
    .yajl_start_map = cb_start_map,
    .yajl_map_key = cb_string,
    .yajl_end_map = cb_end_map,
    .yajl_start_array = cb_start_array,
    .yajl_end_array = cb_end_array,
};

/*
 * Parse s[0..len) as one JSON text straight into the generator. Returns
 * false when it is not one (or nests deeper than yajl_gen allows); the
 * generator then holds half a value and the line must be started over.
 * *oom is set when the parser could not be allocated.
 */
static bool embed_json(struct consumer_fmt *f, const char *s, size_t len, bool *oom_ret)
{
	yajl_handle h = yajl_alloc(&embed_callbacks, NULL, f);
	bool ok;

	if (!h) {
		*oom_ret = true;
		return false;
	}
	ok = yajl_parse(h, (const unsigned char *)s, len) == yajl_status_ok &&
	     yajl_complete_parse(h) == yajl_status_ok;
	yajl_free(h);
	return ok;
}

/*
 * See consumer.h. A JSON candidate is parsed directly into the line; when
 * it turns out not to be JSON, the line is started over with that candidate
 * (by ordinal, a bit in forced) rendered as a string. Valid JSON, the
 * common case, is therefore parsed once.
 */
bool consumer_fmt_line(struct consumer_fmt *f, const char *stream, size_t stream_len,
                       const char *entry_id, size_t entry_id_len,
                       const struct consumer_field *fields, size_t nfields, const char **ret_line,
                       size_t *ret_len)
{
	uint32_t forced = 0;

	for (;;) {
		const unsigned char *out;
		unsigned candidate = 0;
		bool restart = false, oom_hit = false;
		size_t outlen;

		yajl_gen_reset(f->g, NULL);
		yajl_gen_clear(f->g);
		if (yajl_gen_map_open(f->g) != yajl_gen_status_ok ||
		    !gen_string(f, CONSUMER_KEY_STREAM, strlen(CONSUMER_KEY_STREAM)) ||
		    !gen_string(f, stream, stream_len) ||
		    !gen_string(f, CONSUMER_KEY_ENTRY_ID, strlen(CONSUMER_KEY_ENTRY_ID)) ||
		    !gen_string(f, entry_id, entry_id_len))
			return false;
		for (size_t i = 0; i < nfields && !restart; i++) {
			const struct consumer_field *fl = &fields[i];

			if (!gen_string(f, fl->name, fl->name_len))
				return false;
			if (consumer_is_json_field(fl->name, fl->name_len)) {
				unsigned k = candidate++;

				if (k < MAX_JSON_FIELDS && !(forced & (UINT32_C(1) << k))) {
					if (embed_json(f, fl->value, fl->value_len, &oom_hit))
						continue;
					if (oom_hit)
						return false;
					forced |= UINT32_C(1) << k;
					restart = true;
					continue;
				}
			}
			if (!gen_string(f, fl->value, fl->value_len))
				return false;
		}
		if (restart)
			continue;
		if (yajl_gen_map_close(f->g) != yajl_gen_status_ok)
			return false;
		yajl_gen_reset(f->g, "\n"); /* appends the separator to the buffer now */
		if (yajl_gen_get_buf(f->g, &out, &outlen) != yajl_gen_status_ok)
			return false;
		*ret_line = (const char *)out;
		*ret_len = outlen;
		return true;
	}
}
