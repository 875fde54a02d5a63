/*
 * event.c - outbox rows and logical messages to stream events.
 *
 * The mapper routes each row through the stream template, checks the event
 * id, and lays out the entry's fields. Rows it cannot map become dead-letter
 * events carrying the reason and (a bounded prefix of) the raw wal2json
 * object, so nothing is skipped silently.
 */
#include "event.h"

#include <stdio.h>
#include <string.h>

#include "buf.h"

enum part_kind { PART_LITERAL, PART_COLUMN };

struct tmpl_part {
	enum part_kind kind;
	char *text; /* literal text or column name */
	size_t len;
};

struct stream_tmpl {
	struct tmpl_part *parts;
	size_t nparts;
	bool fixed;
};

struct mapper {
	const struct relay_config *cf;
	struct stream_tmpl *tmpl;
	const char *id_column;
	size_t id_column_len;
	bool uuid_ids;      /* --id-format uuid */
	struct buf stream;  /* rendered stream name */
	struct buf scratch; /* _lsn, _xid texts */
	struct event_field *fields;
	size_t fields_cap;
	char raw_bytes[24]; /* a cut dead letter's original raw size, decimal */
	bool failed;
};

#define XSTR(x) STR(x)
#define STR(x) #x

static bool is_ctrl(unsigned char c)
{
	return c < 0x20 || c == 0x7f;
}

static bool tmpl_push(struct stream_tmpl *t, enum part_kind kind, const char *s, size_t len)
{
	struct tmpl_part *p = realloc(t->parts, (t->nparts + 1) * sizeof(*p));
	char *copy;

	if (!p)
		return false;
	t->parts = p;
	copy = malloc(len + 1);
	if (!copy)
		return false;
	memcpy(copy, s, len);
	copy[len] = '\0';
	t->parts[t->nparts++] = (struct tmpl_part){kind, copy, len};
	return true;
}

struct stream_tmpl *stream_tmpl_compile(const char *spec, char *err, size_t errlen)
{
	struct stream_tmpl *t;
	struct buf lit = {0};
	size_t i = 0, n = strlen(spec);

	if (n == 0) {
		snprintf(err, errlen, "stream template is empty");
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	t->fixed = true;
	while (i < n) {
		char c = spec[i];

		if (c == '{' && i + 1 < n && spec[i + 1] == '{') {
			buf_putc(&lit, '{');
			i += 2;
		} else if (c == '}' && i + 1 < n && spec[i + 1] == '}') {
			buf_putc(&lit, '}');
			i += 2;
		} else if (c == '{') {
			const char *close = memchr(spec + i + 1, '}', n - i - 1);
			size_t nlen;

			if (!close) {
				snprintf(err, errlen,
				         "unclosed \"{\" at position %zu in stream template \"%s\": "
				         "write {column} or {{ for a literal brace",
				         i + 1, spec);
				goto fail;
			}
			nlen = (size_t)(close - (spec + i + 1));
			if (nlen == 0) {
				snprintf(err, errlen,
				         "empty placeholder \"{}\" in stream template \"%s\": "
				         "name a column, e.g. {aggregate_type}",
				         spec);
				goto fail;
			}
			if (memchr(spec + i + 1, '{', nlen)) {
				snprintf(err, errlen, "nested \"{\" in stream template \"%s\"", spec);
				goto fail;
			}
			if (lit.len && !tmpl_push(t, PART_LITERAL, lit.data, lit.len))
				goto oom;
			buf_reset(&lit);
			if (!tmpl_push(t, PART_COLUMN, spec + i + 1, nlen))
				goto oom;
			t->fixed = false;
			i += nlen + 2;
		} else if (c == '}') {
			snprintf(err, errlen,
			         "unmatched \"}\" at position %zu in stream template \"%s\": "
			         "write }} for a literal brace",
			         i + 1, spec);
			goto fail;
		} else if (is_ctrl((unsigned char)c)) {
			/* Every name rendered from it would be dead-lettered (see render). */
			snprintf(err, errlen,
			         "stream template has control byte 0x%02x at position %zu: stream "
			         "names must not contain bytes below 0x20 or 0x7f",
			         (unsigned char)c, i + 1);
			goto fail;
		} else {
			buf_putc(&lit, c);
			i++;
		}
	}
	if (lit.len && !tmpl_push(t, PART_LITERAL, lit.data, lit.len))
		goto oom;
	if (lit.failed)
		goto oom;
	buf_finish(&lit);
	return t;
oom:
	snprintf(err, errlen, "out of memory");
fail:
	buf_finish(&lit);
	stream_tmpl_free(t);
	return NULL;
}

void stream_tmpl_free(struct stream_tmpl *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nparts; i++)
		free(t->parts[i].text);
	free(t->parts);
	free(t);
}

size_t stream_tmpl_ncolumns(const struct stream_tmpl *t)
{
	size_t n = 0;

	for (size_t i = 0; i < t->nparts; i++)
		n += t->parts[i].kind == PART_COLUMN;
	return n;
}

const char *stream_tmpl_column(const struct stream_tmpl *t, size_t i)
{
	for (size_t p = 0; p < t->nparts; p++)
		if (t->parts[p].kind == PART_COLUMN && i-- == 0)
			return t->parts[p].text;
	return NULL;
}

bool stream_tmpl_is_fixed(const struct stream_tmpl *t)
{
	return t->fixed;
}

static const struct w2j_field *find_field(const struct w2j_field *f, size_t n, const char *name,
                                          size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (f[i].name_len == len && memcmp(f[i].name, name, len) == 0)
			return &f[i];
	return NULL;
}

bool stream_hash_tag(const char *s, size_t len, struct buf *out)
{
	const char *open = memchr(s, '{', len);

	buf_reset(out);
	if (open) {
		size_t rest = len - (size_t)(open - s) - 1;
		const char *close = memchr(open + 1, '}', rest);

		if (close && close > open + 1) {
			buf_append(out, open, (size_t)(close - open) + 1);
			return true;
		}
	}
	/* No valid tag: Redis hashes the whole name, so the tag must be all of it. */
	if (memchr(s, '}', len))
		return false;
	buf_putc(out, '{');
	buf_append(out, s, len);
	buf_putc(out, '}');
	return true;
}

bool stream_key_base(struct buf *out, const char *prefix, const char *kind, const char *s,
                     size_t len, bool per_stream, struct buf *tag)
{
	if (!stream_hash_tag(s, len, tag))
		return false;
	buf_puts(out, prefix);
	buf_putc(out, ':');
	buf_puts(out, kind);
	buf_putc(out, ':');
	buf_append(out, tag->data, tag->len);
	if (per_stream && !(tag->len == len + 2 && memcmp(tag->data + 1, s, len) == 0)) {
		buf_putc(out, '#');
		buf_put_u64(out, len);
		buf_putc(out, ':');
		buf_append(out, s, len);
	}
	return !out->failed && !tag->failed;
}

size_t stream_name_ctrl(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (is_ctrl((unsigned char)s[i]))
			return i;
	return len;
}

const char *stream_name_check(const char *s, size_t len)
{
	struct buf tag = {0};
	bool ok;

	if (len == 0)
		return "is empty";
	if (len > STREAM_NAME_MAX)
		return "is longer than " XSTR(STREAM_NAME_MAX) " bytes";
	if (stream_name_ctrl(s, len) < len)
		return "contains a control byte (below 0x20, or 0x7f): use printable characters only";
	ok = stream_hash_tag(s, len, &tag);
	buf_finish(&tag);
	if (!ok)
		return "contains \"}\" outside a {hash tag}: no key could share its Redis Cluster "
		       "slot; drop the \"}\" or wrap a non-empty tag in braces, e.g. outbox:{dead-letter}";
	return NULL;
}

bool stream_tmpl_render(const struct stream_tmpl *t, const struct w2j_field *fields, size_t n,
                        struct buf *out, const char **reason)
{
	static char why[256];
	struct buf tag = {0};
	size_t ctrl;
	bool ok;

	buf_reset(out);
	for (size_t i = 0; i < t->nparts; i++) {
		const struct tmpl_part *p = &t->parts[i];
		const struct w2j_field *f;

		if (p->kind == PART_LITERAL) {
			buf_append(out, p->text, p->len);
			continue;
		}
		f = find_field(fields, n, p->text, p->len);
		if (!f) {
			snprintf(why, sizeof(why), "routing column \"%s\" is missing", p->text);
			*reason = why;
			return false;
		}
		if (f->kind == W2J_KIND_NULL || f->value_len == 0) {
			snprintf(why, sizeof(why), "routing column \"%s\" is %s", p->text,
			         f->kind == W2J_KIND_NULL ? "NULL" : "empty");
			*reason = why;
			return false;
		}
		/* A NUL cuts the name short for every C-string reader (metrics
		 * labels, outbox-consume's stream set); \n and friends break log
		 * lines and label values. Literals were checked at compile time. */
		ctrl = stream_name_ctrl(f->value, f->value_len);
		if (ctrl < f->value_len) {
			snprintf(why, sizeof(why),
			         "routing column \"%s\" holds control byte 0x%02x (at byte %zu); "
			         "stream names must not contain bytes below 0x20 or 0x7f",
			         p->text, (unsigned char)f->value[ctrl], ctrl);
			*reason = why;
			return false;
		}
		buf_append(out, f->value, f->value_len);
	}
	if (out->failed) {
		*reason = "out of memory rendering the stream name";
		return false;
	}
	if (out->len == 0) {
		*reason = "stream name is empty";
		return false;
	}
	if (out->len > STREAM_NAME_MAX) {
		snprintf(why, sizeof(why), "stream name is %zu bytes, longer than %d", out->len,
		         STREAM_NAME_MAX);
		*reason = why;
		return false;
	}
	ok = stream_hash_tag(out->data, out->len, &tag);
	buf_finish(&tag);
	if (!ok) {
		*reason = "stream name contains \"}\" outside a {hash tag}";
		return false;
	}
	return true;
}

struct mapper *mapper_create(const struct relay_config *cf, char *err, size_t errlen)
{
	struct mapper *m = calloc(1, sizeof(*m));

	if (!m) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	m->cf = cf;
	m->tmpl = stream_tmpl_compile(cf->stream, err, errlen);
	if (!m->tmpl) {
		free(m);
		return NULL;
	}
	m->id_column = cf->id_column;
	m->id_column_len = strlen(cf->id_column);
	m->uuid_ids = cf->id_format && strcmp(cf->id_format, "uuid") == 0;
	return m;
}

void mapper_destroy(struct mapper *m)
{
	if (!m)
		return;
	stream_tmpl_free(m->tmpl);
	buf_finish(&m->stream);
	buf_finish(&m->scratch);
	free(m->fields);
	free(m);
}

bool mapper_failed(const struct mapper *m)
{
	return m->failed;
}

static bool ensure_fields(struct mapper *m, size_t n)
{
	struct event_field *f;

	if (n <= m->fields_cap)
		return true;
	f = realloc(m->fields, n * sizeof(*f));
	if (!f) {
		m->failed = true;
		return false;
	}
	m->fields = f;
	m->fields_cap = n;
	return true;
}

/*
 * Append _lsn, _xid and _committed_at after nf fields. The texts live in
 * m->scratch, which is filled completely before any pointer into it is
 * taken, so a realloc cannot leave a dangling field.
 */
static size_t add_meta(struct mapper *m, const struct txn_info *tx, size_t nf)
{
	char lsnbuf[LSN_STRLEN];
	size_t lsn_len, xid_off, xid_len = 0;

	buf_reset(&m->scratch);
	buf_puts(&m->scratch, lsn_format(tx->commit_lsn, lsnbuf));
	lsn_len = m->scratch.len;
	buf_putc(&m->scratch, '\0');
	xid_off = m->scratch.len;
	if (tx->has_xid) {
		buf_put_u64(&m->scratch, tx->xid);
		xid_len = m->scratch.len - xid_off;
	}
	if (m->scratch.failed) {
		m->failed = true;
		return nf;
	}
	m->fields[nf++] = (struct event_field){"_lsn", 4, m->scratch.data, lsn_len};
	if (tx->has_xid)
		m->fields[nf++] = (struct event_field){"_xid", 4, m->scratch.data + xid_off, xid_len};
	if (tx->committed_at)
		m->fields[nf++] =
		    (struct event_field){"_committed_at", 13, tx->committed_at, tx->committed_at_len};
	return nf;
}

/*
 * How much of a raw object of len bytes a dead letter keeps: all of it up to
 * DEAD_RAW_MAX, else DEAD_RAW_MAX bytes less a UTF-8 character that would
 * straddle the cut (at most 3 continuation bytes).
 */
static size_t raw_keep(const char *raw, size_t len)
{
	size_t keep = DEAD_RAW_MAX;

	if (len <= DEAD_RAW_MAX)
		return len;
	while (keep > DEAD_RAW_MAX - 3 && ((unsigned char)raw[keep] & 0xc0) == 0x80)
		keep--;
	return keep;
}

void mapper_dead_letter(struct mapper *m, const struct txn_info *tx, uint32_t index,
                        enum dead_reason kind, const char *reason, const char *raw, size_t rawlen,
                        struct event *ret)
{
	size_t nf = 0, keep = raw_keep(raw, rawlen);

	*ret = (struct event){0};
	if (!ensure_fields(m, 8))
		return;
	m->fields[nf++] = (struct event_field){"reason", 6, reason, strlen(reason)};
	m->fields[nf++] = (struct event_field){"raw", 3, raw, keep};
	if (keep < rawlen) {
		/* Redis drops a connection sending a bulk over proto-max-bulk-len:
		 * an uncut raw could stall the relay for good. */
		snprintf(m->raw_bytes, sizeof(m->raw_bytes), "%zu", rawlen);
		m->fields[nf++] = (struct event_field){"raw_truncated", 13, "true", 4};
		m->fields[nf++] = (struct event_field){"raw_bytes", 9, m->raw_bytes, strlen(m->raw_bytes)};
	}
	m->fields[nf++] = (struct event_field){"slot", 4, m->cf->slot, strlen(m->cf->slot)};
	nf = add_meta(m, tx, nf);
	ret->stream = m->cf->dead_letter_stream;
	ret->stream_len = strlen(m->cf->dead_letter_stream);
	ret->id = NULL;
	ret->id_len = 0;
	ret->commit_lsn = tx->commit_lsn;
	ret->index = index;
	ret->fields = m->fields;
	ret->nfields = nf;
	ret->dead_reason = kind;
	ret->committed_unix_us = tx->committed_unix_us;
}

/* 8-4-4-4-12 hex digits, either case. */
static bool is_uuid(const char *s, size_t n)
{
	if (n != 36)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
		             (s[i] >= 'A' && s[i] <= 'F'))) {
			return false;
		}
	}
	return true;
}

/* A text-typed column (not json/jsonb): its JSON-ness has to be checked. */
static bool is_text_type(const struct w2j_field *f)
{
	static const char *const types[] = {"text", "character varying", "varchar", "character",
	                                    "bpchar"};

	if (!f->type)
		return false;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		size_t n = strlen(types[i]);

		if (f->type_len >= n && strncmp(f->type, types[i], n) == 0 &&
		    (f->type_len == n || f->type[n] == '('))
			return true;
	}
	return false;
}

static bool is_json_column(const struct w2j_field *f)
{
	return (f->name_len == 7 && memcmp(f->name, "payload", 7) == 0) ||
	       (f->name_len == 7 && memcmp(f->name, "headers", 7) == 0);
}

enum map_result mapper_map(struct mapper *m, const struct txn_info *tx, uint32_t index,
                           const struct w2j_field *fields, size_t nfields, const char *raw,
                           size_t rawlen, struct event *ret, const char **reason)
{
	static char why[256];
	const struct w2j_field *idf;
	enum dead_reason kind = DEAD_ID_MISSING;
	size_t nf = 0, total;

	idf = find_field(fields, nfields, m->id_column, m->id_column_len);
	if (!idf || idf->kind == W2J_KIND_NULL || idf->value_len == 0) {
		snprintf(why, sizeof(why), "event id column \"%s\" is %s", m->id_column,
		         !idf                         ? "missing"
		         : idf->kind == W2J_KIND_NULL ? "NULL"
		                                      : "empty");
		*reason = why;
		goto dead;
	}
	kind = DEAD_OTHER;
	if (idf->kind == W2J_KIND_JSON) {
		snprintf(why, sizeof(why), "event id \"%s\" is a JSON object or array, not a scalar",
		         m->id_column);
		*reason = why;
		goto dead;
	}
	if (m->uuid_ids && !is_uuid(idf->value, idf->value_len)) {
		snprintf(why, sizeof(why), "event id \"%.*s\" is not a uuid (--id-format uuid)",
		         idf->value_len > 64 ? 64 : (int)idf->value_len, idf->value);
		*reason = why;
		goto dead;
	}
	for (size_t i = 0; i < nfields; i++) {
		const struct w2j_field *f = &fields[i];

		if (f->kind == W2J_KIND_STRING && is_json_column(f) && is_text_type(f) &&
		    !w2j_json_valid(f->value, f->value_len)) {
			kind = DEAD_NOT_JSON;
			snprintf(why, sizeof(why), "column \"%.*s\" is %.*s and does not hold valid JSON",
			         (int)f->name_len, f->name, (int)f->type_len, f->type);
			*reason = why;
			goto dead;
		}
	}
	kind = DEAD_ROUTING;
	if (!stream_tmpl_render(m->tmpl, fields, nfields, &m->stream, reason))
		goto dead;
	/* What XADD gets: the non-null fields plus _lsn, _xid, _committed_at. */
	total = 1 + tx->has_xid + (tx->committed_at != NULL);
	for (size_t i = 0; i < nfields; i++)
		total += fields[i].kind != W2J_KIND_NULL;
	if (total > EVENT_MAX_FIELDS) {
		kind = DEAD_TOO_LARGE;
		snprintf(why, sizeof(why),
		         "event has %zu fields (with _lsn, _xid, _committed_at), more than the %d "
		         "a stream entry may have",
		         total, EVENT_MAX_FIELDS);
		*reason = why;
		goto dead;
	}
	kind = DEAD_OTHER;
	if (!ensure_fields(m, nfields + 3)) {
		*reason = "out of memory";
		goto dead;
	}
	for (size_t i = 0; i < nfields; i++) {
		if (fields[i].kind == W2J_KIND_NULL)
			continue;
		m->fields[nf++] = (struct event_field){fields[i].name, fields[i].name_len, fields[i].value,
		                                       fields[i].value_len};
	}
	nf = add_meta(m, tx, nf);
	*ret = (struct event){
	    .stream = m->stream.data,
	    .stream_len = m->stream.len,
	    .id = idf->value,
	    .id_len = idf->value_len,
	    .commit_lsn = tx->commit_lsn,
	    .index = index,
	    .fields = m->fields,
	    .nfields = nf,
	    .committed_unix_us = tx->committed_unix_us,
	};
	return MAP_EVENT;
dead:
	mapper_dead_letter(m, tx, index, kind, *reason, raw, rawlen, ret);
	return MAP_DEAD_LETTER;
}
