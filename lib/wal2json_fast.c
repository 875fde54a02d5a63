/*
 * wal2json_fast.c - the decoder's own JSON tokenizer, in front of yajl (see
 * the comment below), and the in-place string handling of
 * w2j_decode_inplace().
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "wal2json_int.h"

/* --- the fast path ---------------------------------------------------- */

/*
 * A JSON tokenizer for what wal2json prints, driving the same callbacks as
 * yajl. It exists for speed: most of an outbox row is its payload, a jsonb
 * value that wal2json prints as one long escaped string, and yajl lexes that
 * byte by byte. Here the next '"', '\\' or control byte is found 16 bytes at a
 * time (SSE2) and the runs between escapes are copied with memcpy.
 *
 * It accepts a subset of JSON and gives up (FAST_FALLBACK) on anything else
 * (\\u escapes, raw control bytes, unusual numbers, trailing bytes, deep
 * nesting, any syntax error); the caller then resets and parses the same
 * input with yajl, so yajl stays the judge of everything unusual and its
 * error messages are kept. tests/fuzz/fuzz_decode.c checks that both paths
 * give the same result.
 */

#define FAST_MAX_DEPTH 64

/* The first byte of p[0..end) that is '"', '\\' or below 0x20; end if none. */
static const unsigned char *find_special(const unsigned char *p, const unsigned char *end)
{
#ifdef __SSE2__
	const __m128i quote = _mm_set1_epi8('"');
	const __m128i bslash = _mm_set1_epi8('\\');
	const __m128i ctl = _mm_set1_epi8(0x1f);

	while (end - p >= 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
		__m128i hit =
		    _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
		                 _mm_cmpeq_epi8(_mm_min_epu8(v, ctl), v));
		int mask = _mm_movemask_epi8(hit);

		if (mask)
			return p + __builtin_ctz((unsigned)mask);
		p += 16;
	}
#endif
	while (p < end && *p != '"' && *p != '\\' && *p >= 0x20)
		p++;
	return p;
}

/* What a one-letter escape \\c stands for; 0 when c is not one. */
static char simple_escape(unsigned char c)
{
	switch (c) {
	case '"':
	case '\\':
	case '/':
		return (char)c;
	case 'b':
		return '\b';
	case 'f':
		return '\f';
	case 'n':
		return '\n';
	case 'r':
		return '\r';
	case 't':
		return '\t';
	default:
		return 0;
	}
}

static int hex_val(unsigned char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/* The code point of \uXXXX at p (p[0] is the backslash), -1 when malformed. */
static long u_escape(const unsigned char *p, const unsigned char *end)
{
	long v = 0;

	if (end - p < 6)
		return -1;
	for (int i = 2; i < 6; i++) {
		int h = hex_val(p[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/*
 * Scan the escaped string whose first special byte is p (a backslash) for
 * its closing quote and unescaped length, accepting only escapes whose
 * meaning is beyond doubt: the one-letter ones and \u outside the surrogates
 * and U+0000 (everything else is yajl's call). Writes nothing.
 */
static bool scan_escaped(const unsigned char *start, const unsigned char *p,
                         const unsigned char *end, const unsigned char **close, size_t *len)
{
	size_t n = (size_t)(p - start);

	for (;;) {
		const unsigned char *q;

		if (end - p < 2)
			return false;
		if (p[1] == 'u') {
			long c = u_escape(p, end);

			if (c <= 0 || (c >= 0xd800 && c <= 0xdfff))
				return false;
			n += c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
			p += 6;
		} else if (simple_escape(p[1])) {
			n++;
			p += 2;
		} else {
			return false;
		}
		q = find_special(p, end);
		if (q == end || *q < 0x20)
			return false;
		n += (size_t)(q - p);
		p = q;
		if (*p == '"')
			break;
	}
	*close = p;
	*len = n;
	return true;
}

/* Undo the escapes of a string checked by scan_escaped(), writing from o. */
size_t w2j_unescape_inplace(char *o, const char *p, const char *close)
{
	char *o0 = o;

	while (p < close) {
		if (*p != '\\') {
			const char *q = memchr(p, '\\', (size_t)(close - p));
			size_t run = (size_t)((q ? q : close) - p);

			memmove(o, p, run);
			o += run;
			p += run;
			continue;
		}
		switch (p[1]) {
		case 'u': {
			long c = u_escape((const unsigned char *)p, (const unsigned char *)close);

			if (c < 0x80) {
				*o++ = (char)c;
			} else if (c < 0x800) {
				*o++ = (char)(0xc0 | (c >> 6));
				*o++ = (char)(0x80 | (c & 0x3f));
			} else {
				*o++ = (char)(0xe0 | (c >> 12));
				*o++ = (char)(0x80 | ((c >> 6) & 0x3f));
				*o++ = (char)(0x80 | (c & 0x3f));
			}
			p += 6;
			continue;
		}
		default: /* checked by scan_escaped() */
			*o++ = simple_escape((unsigned char)p[1]);
			break;
		}
		p += 2;
	}
	return (size_t)(o - o0);
}

/*
 * w2j_decode_inplace(): a string value of W2J_INPLACE_MIN bytes or more is
 * handed to the callbacks as it lies in the input (*s escaped still, *n its
 * unescaped length) and recorded for w2j_decode_inplace() to finish.
 * FAST_FALLBACK: not such a string, nothing recorded. Never a key: the key
 * callback compares the text it gets, so a key must come unescaped.
 */
static enum fast_result big_string(struct w2j_decoder *d, const unsigned char **pp,
                                   const unsigned char *end, const unsigned char *p,
                                   const unsigned char **s, size_t *n, bool is_key)
{
	const unsigned char *start = *pp + 1, *close = p;
	size_t len = (size_t)(p - start);

	/* Only a column's "value" and a message's "content": nothing that an
	 * error message quotes while parsing goes on. */
	bool wanted = !is_key && ((d->depth == 3 && d->ckey == C_VALUE && !d->skipping) ||
	                          (d->depth == 1 && d->key == K_CONTENT));

	if (!wanted || (size_t)(end - start) < d->inplace_min)
		return FAST_FALLBACK;
	if (*p != '"' && !scan_escaped(start, p, end, &close, &len))
		return FAST_FALLBACK;
	if ((size_t)(close - start) < d->inplace_min)
		return FAST_FALLBACK;
	if (d->nbigs == d->bigs_cap) {
		size_t cap = d->bigs_cap ? d->bigs_cap * 2 : 8;
		struct big *nb = realloc(d->bigs, cap * sizeof(*nb));

		if (!nb) {
			w2j_oom(d);
			return FAST_FAILED;
		}
		d->bigs = nb;
		d->bigs_cap = cap;
	}
	d->bigs[d->nbigs++] =
	    (struct big){(size_t)((const char *)start - d->input), (size_t)(close - start), len};
	d->big_ptr = start;
	d->big_len = len;
	*s = start;
	*n = len;
	*pp = close + 1;
	return FAST_OK;
}

/*
 * The string whose opening quote is at *pp (an object key when is_key): on
 * FAST_OK *s and *n are its content (in the input when it has no escapes,
 * else in d->unesc) and *pp is past the closing quote.
 */
static enum fast_result fast_string(struct w2j_decoder *d, const unsigned char **pp,
                                    const unsigned char *end, const unsigned char **s, size_t *n,
                                    bool is_key)
{
	const unsigned char *start = *pp + 1;
	const unsigned char *p = find_special(start, end), *close;

	if (p == end || *p < 0x20)
		return FAST_FALLBACK;
	if (d->input) {
		enum fast_result r = big_string(d, pp, end, p, s, n, is_key);

		if (r != FAST_FALLBACK)
			return r;
	}
	if (*p == '"') {
		*s = start;
		*n = (size_t)(p - start);
		*pp = p + 1;
		return FAST_OK;
	}
	/* Find the closing quote first: the string itself bounds the copy
	 * (unescaping never lengthens), which d->unesc keeps for the next one. */
	close = p;
	for (;;) {
		/* *close is a backslash; \\u (rare from wal2json) and invalid escapes: yajl's call */
		if (end - close < 2 || !simple_escape(close[1]))
			return FAST_FALLBACK;
		close = find_special(close + 2, end);
		if (close == end || *close < 0x20)
			return FAST_FALLBACK;
		if (*close == '"')
			break;
	}
	if ((size_t)(close - start) > d->unesc_cap) {
		size_t cap = (size_t)(close - start);
		char *nb = realloc(d->unesc, cap);

		if (!nb) {
			w2j_oom(d);
			return FAST_FAILED;
		}
		d->unesc = nb;
		d->unesc_cap = cap;
	}
	*s = (const unsigned char *)d->unesc;
	*n = w2j_unescape_inplace(d->unesc, (const char *)start, (const char *)close);
	*pp = close + 1;
	return FAST_OK;
}

static bool fast_delim(const unsigned char *p, const unsigned char *end)
{
	return p == end || *p == ',' || *p == '}' || *p == ']' || *p == ' ' || *p == '\n' ||
	       *p == '\t' || *p == '\r';
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/* A JSON number at *pp, strictly by the grammar; *pp moves past it. */
static bool fast_number(const unsigned char **pp, const unsigned char *end)
{
	const unsigned char *p = *pp;

	if (p < end && *p == '-')
		p++;
	if (p == end || !is_digit(*p))
		return false;
	if (*p == '0')
		p++;
	else
		while (p < end && is_digit(*p))
			p++;
	if (p < end && *p == '.') {
		p++;
		if (p == end || !is_digit(*p))
			return false;
		while (p < end && is_digit(*p))
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (p == end || !is_digit(*p))
			return false;
		while (p < end && is_digit(*p))
			p++;
	}
	if (!fast_delim(p, end))
		return false;
	*pp = p;
	return true;
}

/* The literal word at *pp, followed by a delimiter; *pp moves past it. */
static bool fast_literal(const unsigned char **pp, const unsigned char *end, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(end - *pp) < n || memcmp(*pp, word, n) != 0 || !fast_delim(*pp + n, end))
		return false;
	*pp += n;
	return true;
}

static const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end)
{
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
		p++;
	return p;
}

/* Tokenize buf[0..len) into cb's callbacks (see above). */
enum fast_result w2j_fast_parse(struct w2j_decoder *d, const yajl_callbacks *cb, const char *buf,
                                size_t len)
{
	enum { S_VALUE, S_VALUE_OR_CLOSE, S_KEY, S_KEY_OR_CLOSE, S_AFTER } st = S_VALUE;
	const unsigned char *p = (const unsigned char *)buf, *end = p + len;
	char stack[FAST_MAX_DEPTH];
	int depth = 0;

	for (;;) {
		const unsigned char *s;
		size_t n;
		enum fast_result r;
		int ok;

		p = skip_ws(p, end);
		if (p == end)
			return st == S_AFTER && depth == 0 ? FAST_OK : FAST_FALLBACK;
		switch (st) {
		case S_KEY_OR_CLOSE:
		case S_VALUE_OR_CLOSE:
			if (*p == (st == S_KEY_OR_CLOSE ? '}' : ']'))
				goto close;
			st = st == S_KEY_OR_CLOSE ? S_KEY : S_VALUE;
			continue;
		case S_KEY:
			if (*p != '"')
				return FAST_FALLBACK;
			r = fast_string(d, &p, end, &s, &n, true);
			if (r != FAST_OK)
				return r;
			p = skip_ws(p, end);
			if (p == end || *p != ':')
				return FAST_FALLBACK;
			p++;
			if (!cb->yajl_map_key(d, s, n))
				return FAST_FAILED;
			st = S_VALUE;
			continue;
		case S_AFTER:
			if (depth == 0)
				return FAST_FALLBACK; /* bytes after the value */
			if (*p == ',') {
				p++;
				st = stack[depth - 1] == '{' ? S_KEY : S_VALUE;
				continue;
			}
			if (*p == (stack[depth - 1] == '{' ? '}' : ']'))
				goto close;
			return FAST_FALLBACK;
		case S_VALUE:
			break;
		}

		/* A value. */
		switch (*p) {
		case '{':
		case '[':
			if (depth == FAST_MAX_DEPTH)
				return FAST_FALLBACK;
			stack[depth++] = (char)*p;
			ok = *p == '{' ? cb->yajl_start_map(d) : cb->yajl_start_array(d);
			p++;
			if (!ok)
				return FAST_FAILED;
			st = stack[depth - 1] == '{' ? S_KEY_OR_CLOSE : S_VALUE_OR_CLOSE;
			continue;
		case '"':
			r = fast_string(d, &p, end, &s, &n, false);
			if (r != FAST_OK)
				return r;
			ok = cb->yajl_string(d, s, n);
			break;
		case 't':
		case 'f':
		case 'n':
			if (fast_literal(&p, end, "true"))
				ok = cb->yajl_boolean(d, 1);
			else if (fast_literal(&p, end, "false"))
				ok = cb->yajl_boolean(d, 0);
			else if (fast_literal(&p, end, "null"))
				ok = cb->yajl_null(d);
			else
				return FAST_FALLBACK;
			break;
		default:
			s = p;
			if (!fast_number(&p, end))
				return FAST_FALLBACK;
			ok = cb->yajl_number(d, (const char *)s, (size_t)(p - s));
			break;
		}
		if (!ok)
			return FAST_FAILED;
		st = S_AFTER;
		continue;
	close:
		depth--;
		ok = stack[depth] == '{' ? cb->yajl_end_map(d) : cb->yajl_end_array(d);
		p++;
		if (!ok)
			return FAST_FAILED;
		st = S_AFTER;
	}
}
