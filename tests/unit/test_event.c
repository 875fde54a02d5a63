/*
 * test_event.c - stream templates, hash tags and row-to-event mapping.
 */
#include "buf.h"
#include "event.h"
#include "test.h"

static struct w2j_field col(const char *name, enum w2j_kind kind, const char *value)
{
	return (struct w2j_field){
	    name, strlen(name), "text", 4, kind, value, value ? strlen(value) : 0};
}

static const char *render(const char *spec, const struct w2j_field *f, size_t n,
                          const char **reason)
{
	static struct buf out;
	char err[256];
	struct stream_tmpl *t = stream_tmpl_compile(spec, err, sizeof(err));
	bool ok;

	if (!t)
		return NULL;
	ok = stream_tmpl_render(t, f, n, &out, reason);
	stream_tmpl_free(t);
	return ok ? out.data : NULL;
}

TEST(template_default)
{
	struct w2j_field f[] = {col("aggregate_type", W2J_KIND_STRING, "order")};
	const char *reason = NULL;

	CHECK_STR(render("outbox:{aggregate_type}", f, 1, &reason), "outbox:order");
}

TEST(template_fixed_and_escapes)
{
	char err[256];
	struct stream_tmpl *t = stream_tmpl_compile("events", err, sizeof(err));
	struct w2j_field f[] = {col("a", W2J_KIND_STRING, "x"), col("b", W2J_KIND_NUMBER, "7")};
	const char *reason = NULL;

	CHECK(t && stream_tmpl_is_fixed(t));
	stream_tmpl_free(t);
	CHECK_STR(render("{{tag}}:{a}-{b}", f, 2, &reason), "{tag}:x-7");
}

TEST(template_errors)
{
	char err[256];

	CHECK(stream_tmpl_compile("", err, sizeof(err)) == NULL);
	CHECK(stream_tmpl_compile("outbox:{aggregate_type", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "unclosed") != NULL);
	CHECK(stream_tmpl_compile("outbox:{}", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "empty placeholder") != NULL);
	CHECK(stream_tmpl_compile("outbox}x", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "unmatched") != NULL);
}

TEST(template_render_failures)
{
	struct w2j_field f[] = {col("aggregate_type", W2J_KIND_NULL, NULL),
	                        col("e", W2J_KIND_STRING, "")};
	const char *reason = NULL;
	char big[600];

	CHECK(render("outbox:{aggregate_type}", f, 2, &reason) == NULL);
	CHECK(reason && strstr(reason, "is NULL"));
	CHECK(render("outbox:{nope}", f, 2, &reason) == NULL);
	CHECK(reason && strstr(reason, "missing"));
	CHECK(render("{e}", f, 2, &reason) == NULL);
	CHECK(reason && strstr(reason, "empty"));
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	f[1] = col("e", W2J_KIND_STRING, big);
	CHECK(render("{e}", f, 2, &reason) == NULL);
	CHECK(reason && strstr(reason, "longer than"));
	f[1] = col("e", W2J_KIND_STRING, "a}b");
	CHECK(render("{e}", f, 2, &reason) == NULL);
	CHECK(reason && strstr(reason, "hash tag"));
}

TEST(hash_tags)
{
	struct buf b = {0};

	CHECK(stream_hash_tag("outbox:order", 12, &b));
	CHECK_STR(b.data, "{outbox:order}");
	CHECK(stream_hash_tag("x:{orders}:y", 12, &b));
	CHECK_STR(b.data, "{orders}");
	/* "{}" is not a tag: Redis hashes the whole name, which has a '}' we cannot wrap. */
	CHECK(!stream_hash_tag("a{}b", 4, &b));
	CHECK(stream_hash_tag("a{b", 3, &b));
	CHECK_STR(b.data, "{a{b}");
	buf_finish(&b);
}

static struct relay_config test_config(void)
{
	struct relay_config cf = {0};

	cf.stream = "outbox:{aggregate_type}";
	cf.dead_letter_stream = "outbox:dead-letter";
	cf.id_column = "id";
	cf.slot = "s1";
	return cf;
}

TEST(map_row)
{
	struct relay_config cf = test_config();
	char err[256];
	struct mapper *m = mapper_create(&cf, err, sizeof(err));
	struct w2j_field f[] = {
	    col("id", W2J_KIND_STRING, "e-1"),    col("aggregate_type", W2J_KIND_STRING, "order"),
	    col("note", W2J_KIND_NULL, NULL),     col("payload", W2J_KIND_STRING, "{\"a\": 1}"),
	    col("n", W2J_KIND_NUMBER, "12.5000"),
	};
	struct txn_info tx = {.commit_lsn = 0x1522408,
	                      .has_xid = true,
	                      .xid = 739,
	                      .committed_at = "2026-11-21 23:51:54.887293+00",
	                      .committed_at_len = 29};
	struct event ev;
	const char *reason = NULL;

	CHECK(m != NULL);
	CHECK_INT(mapper_map(m, &tx, 3, f, 5, "{}", 2, &ev, &reason), MAP_EVENT);
	CHECK_MEM(ev.stream, ev.stream_len, "outbox:order");
	CHECK_MEM(ev.id, ev.id_len, "e-1");
	CHECK_INT(ev.index, 3);
	CHECK_INT(ev.nfields, 7); /* 4 non-null columns + _lsn _xid _committed_at */
	CHECK_MEM(ev.fields[0].name, ev.fields[0].name_len, "id");
	CHECK_MEM(ev.fields[2].name, ev.fields[2].name_len, "payload");
	CHECK_MEM(ev.fields[2].value, ev.fields[2].value_len, "{\"a\": 1}");
	CHECK_MEM(ev.fields[3].value, ev.fields[3].value_len, "12.5000");
	CHECK_MEM(ev.fields[4].name, ev.fields[4].name_len, "_lsn");
	CHECK_MEM(ev.fields[4].value, ev.fields[4].value_len, "0/1522408");
	CHECK_MEM(ev.fields[5].value, ev.fields[5].value_len, "739");
	CHECK_MEM(ev.fields[6].name, ev.fields[6].name_len, "_committed_at");
	mapper_destroy(m);
}

TEST(map_dead_letters)
{
	struct relay_config cf = test_config();
	char err[256];
	struct mapper *m = mapper_create(&cf, err, sizeof(err));
	struct txn_info tx = {.commit_lsn = 0x10};
	struct w2j_field nullid[] = {col("id", W2J_KIND_NULL, NULL),
	                             col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field emptyid[] = {col("id", W2J_KIND_STRING, ""),
	                              col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field noroute[] = {col("id", W2J_KIND_STRING, "x"),
	                              col("aggregate_type", W2J_KIND_NULL, NULL)};
	struct event ev;
	const char *reason = NULL;

	CHECK_INT(mapper_map(m, &tx, 0, nullid, 2, "RAW1", 4, &ev, &reason), MAP_DEAD_LETTER);
	CHECK(strstr(reason, "NULL") != NULL);
	CHECK_MEM(ev.stream, ev.stream_len, "outbox:dead-letter");
	CHECK(ev.id == NULL);
	CHECK_MEM(ev.fields[0].name, ev.fields[0].name_len, "reason");
	CHECK_MEM(ev.fields[1].value, ev.fields[1].value_len, "RAW1");
	CHECK_INT(mapper_map(m, &tx, 1, emptyid, 2, "RAW2", 4, &ev, &reason), MAP_DEAD_LETTER);
	CHECK(strstr(reason, "empty") != NULL);
	CHECK_INT(mapper_map(m, &tx, 2, noroute, 2, "RAW3", 4, &ev, &reason), MAP_DEAD_LETTER);
	CHECK(strstr(reason, "routing column") != NULL);
	CHECK_INT(ev.index, 2);
	mapper_destroy(m);
}

TEST(map_id_format_and_text_payload)
{
	struct relay_config cf = test_config();
	char err[256];
	struct mapper *m;
	struct txn_info tx = {.commit_lsn = 0x10};
	struct w2j_field notuuid[] = {col("id", W2J_KIND_STRING, "42"),
	                              col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field isuuid[] = {col("id", W2J_KIND_STRING, "6F0C2A55-8f1e-4c0b-9c7e-6c2f9f3b1a10"),
	                             col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field badjson[] = {col("id", W2J_KIND_STRING, "x"),
	                              col("aggregate_type", W2J_KIND_STRING, "o"),
	                              col("payload", W2J_KIND_STRING, "not json")};
	struct w2j_field okjson[] = {col("id", W2J_KIND_STRING, "x"),
	                             col("aggregate_type", W2J_KIND_STRING, "o"),
	                             col("payload", W2J_KIND_STRING, "{\"a\": [1, 2]}")};
	struct event ev;
	const char *reason = NULL;

	cf.id_format = "uuid";
	m = mapper_create(&cf, err, sizeof(err));
	CHECK_INT(mapper_map(m, &tx, 0, notuuid, 2, "R", 1, &ev, &reason), MAP_DEAD_LETTER);
	CHECK(strstr(reason, "not a uuid") != NULL);
	CHECK_INT(mapper_map(m, &tx, 1, isuuid, 2, "R", 1, &ev, &reason), MAP_EVENT);
	mapper_destroy(m);

	cf.id_format = "any";
	m = mapper_create(&cf, err, sizeof(err));
	CHECK_INT(mapper_map(m, &tx, 0, notuuid, 2, "R", 1, &ev, &reason), MAP_EVENT);
	/* col() types every field "text": a text payload must be JSON */
	CHECK_INT(mapper_map(m, &tx, 1, badjson, 3, "R", 1, &ev, &reason), MAP_DEAD_LETTER);
	CHECK(strstr(reason, "does not hold valid JSON") != NULL);
	CHECK_INT(mapper_map(m, &tx, 2, okjson, 3, "R", 1, &ev, &reason), MAP_EVENT);
	badjson[2].type = "jsonb"; /* never re-validated: PostgreSQL already did */
	badjson[2].type_len = 5;
	CHECK_INT(mapper_map(m, &tx, 3, badjson, 3, "R", 1, &ev, &reason), MAP_EVENT);
	mapper_destroy(m);
}

TEST(mapper_rejects_bad_template)
{
	struct relay_config cf = test_config();
	char err[256] = "";

	cf.stream = "outbox:{";
	CHECK(mapper_create(&cf, err, sizeof(err)) == NULL);
	CHECK(err[0] != '\0');
}

/* A field whose value is a length-counted byte string (may hold NUL). */
static struct w2j_field colb(const char *name, const char *value, size_t len)
{
	return (struct w2j_field){name, strlen(name), "text", 4, W2J_KIND_STRING, value, len};
}

TEST(render_control_bytes)
{
	static const struct {
		const char *v;
		size_t len;
		const char *byte;
	} bad[] = {
	    {"a\0b", 3, "0x00 (at byte 1)"},   {"a\nb", 3, "0x0a"},  {"\tab", 3, "0x09 (at byte 0)"},
	    {"ab\x1f", 3, "0x1f (at byte 2)"}, {"a\x7f", 2, "0x7f"}, {"\r", 1, "0x0d"},
	};
	struct w2j_field f[2];
	const char *reason;
	char err[256];

	f[0] = col("id", W2J_KIND_STRING, "x");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f[1] = colb("aggregate_type", bad[i].v, bad[i].len);
		reason = NULL;
		CHECK(render("outbox:{aggregate_type}", f, 2, &reason) == NULL);
		CHECK(reason && strstr(reason, "routing column \"aggregate_type\" holds control byte"));
		CHECK(reason && strstr(reason, bad[i].byte));
	}
	/* Bytes >= 0x80 (UTF-8) and the rest of printable ASCII are fine. */
	f[1] = col("aggregate_type", W2J_KIND_STRING, "caf\xc3\xa9 ~!$%");
	CHECK_STR(render("outbox:{aggregate_type}", f, 2, &reason), "outbox:caf\xc3\xa9 ~!$%");
	/* A control byte in the template's literal text is a configuration error. */
	CHECK(stream_tmpl_compile("outbox\n{aggregate_type}", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "control byte 0x0a at position 7") != NULL);
	CHECK(stream_tmpl_compile("\x7f", err, sizeof(err)) == NULL);
}

TEST(stream_name_rules)
{
	char big[STREAM_NAME_MAX + 1];

	CHECK(stream_name_check("outbox:dead-letter", 18) == NULL);
	CHECK(stream_name_check("dl:{x}", 6) == NULL);
	CHECK(stream_name_check("a{b", 3) == NULL);
	CHECK_STR(stream_name_check("", 0), "is empty");
	CHECK(strstr(stream_name_check("a}b", 3), "outside a {hash tag}") != NULL);
	CHECK(strstr(stream_name_check("a{}b", 4), "outside a {hash tag}") != NULL);
	CHECK(strstr(stream_name_check("a\0b", 3), "control byte") != NULL);
	CHECK(strstr(stream_name_check("a\x7f", 2), "control byte") != NULL);
	memset(big, 'x', sizeof(big));
	CHECK(stream_name_check(big, STREAM_NAME_MAX) == NULL);
	CHECK_STR(stream_name_check(big, STREAM_NAME_MAX + 1), "is longer than 512 bytes");
	CHECK_INT(stream_name_ctrl("ab\ncd", 5), 2);
	CHECK_INT(stream_name_ctrl("abcd", 4), 4);
}

/* The value of field name in ev, or NULL. */
static const struct event_field *ev_field(const struct event *ev, const char *name)
{
	for (size_t i = 0; i < ev->nfields; i++)
		if (ev->fields[i].name_len == strlen(name) &&
		    memcmp(ev->fields[i].name, name, ev->fields[i].name_len) == 0)
			return &ev->fields[i];
	return NULL;
}

TEST(map_field_limit)
{
	struct relay_config cf = test_config();
	char err[256];
	struct mapper *m = mapper_create(&cf, err, sizeof(err));
	struct txn_info tx = {.commit_lsn = 0x10,
	                      .has_xid = true,
	                      .xid = 7,
	                      .committed_at = "2026-11-21 23:51:54+00",
	                      .committed_at_len = 22};
	struct txn_info bare = {.commit_lsn = 0x10}; /* only _lsn is added */
	size_t n = EVENT_MAX_FIELDS + 2;
	struct w2j_field *f = calloc(n, sizeof(*f));
	struct event ev;
	const char *reason = NULL;

	f[0] = col("id", W2J_KIND_STRING, "e-1");
	f[1] = col("aggregate_type", W2J_KIND_STRING, "order");
	for (size_t i = 2; i < n; i++)
		f[i] = col("k", W2J_KIND_NUMBER, "1");
	/* 2000 columns + 3 metadata fields: over. */
	CHECK_INT(mapper_map(m, &tx, 0, f, EVENT_MAX_FIELDS, "RAW", 3, &ev, &reason), MAP_DEAD_LETTER);
	CHECK_STR(reason, "event has 2003 fields (with _lsn, _xid, _committed_at), more than the "
	                  "2000 a stream entry may have");
	CHECK_INT(ev.dead_reason, DEAD_TOO_LARGE);
	CHECK_MEM(ev.stream, ev.stream_len, "outbox:dead-letter");
	/* Exactly at the limit: 1997 columns + 3. */
	CHECK_INT(mapper_map(m, &tx, 1, f, EVENT_MAX_FIELDS - 3, "RAW", 3, &ev, &reason), MAP_EVENT);
	CHECK_INT(ev.nfields, EVENT_MAX_FIELDS);
	/* The metadata counts: without _xid and _committed_at two more columns fit. */
	CHECK_INT(mapper_map(m, &bare, 2, f, EVENT_MAX_FIELDS - 1, "RAW", 3, &ev, &reason), MAP_EVENT);
	CHECK_INT(mapper_map(m, &bare, 3, f, EVENT_MAX_FIELDS, "RAW", 3, &ev, &reason),
	          MAP_DEAD_LETTER);
	/* NULL columns are not published, so they do not count. */
	f[5] = col("k", W2J_KIND_NULL, NULL);
	CHECK_INT(mapper_map(m, &tx, 4, f, EVENT_MAX_FIELDS - 2, "RAW", 3, &ev, &reason), MAP_EVENT);
	CHECK_INT(ev.nfields, EVENT_MAX_FIELDS);
	free(f);
	mapper_destroy(m);
}

TEST(dead_letter_raw_cap)
{
	struct relay_config cf = test_config();
	char err[256];
	struct mapper *m = mapper_create(&cf, err, sizeof(err));
	struct txn_info tx = {.commit_lsn = 0x10, .has_xid = true, .xid = 7};
	struct w2j_field nullid[] = {col("id", W2J_KIND_NULL, NULL),
	                             col("aggregate_type", W2J_KIND_STRING, "o")};
	size_t big = 3 * 1024 * 1024;
	char *raw = malloc(big);
	struct event ev;
	const struct event_field *f;
	const char *reason = NULL;

	memset(raw, 'z', big);
	/* Up to the cap: raw as it is, no extra fields. */
	mapper_dead_letter(m, &tx, 0, DEAD_UNDECODABLE, "why", raw, DEAD_RAW_MAX, &ev);
	CHECK_INT(ev_field(&ev, "raw")->value_len, DEAD_RAW_MAX);
	CHECK(ev_field(&ev, "raw_truncated") == NULL);
	CHECK(ev_field(&ev, "raw_bytes") == NULL);
	CHECK_INT(ev.dead_reason, DEAD_UNDECODABLE);
	/* Over it, on every path: cut, flagged, original size kept. */
	mapper_dead_letter(m, &tx, 1, DEAD_UNDECODABLE, "why", raw, big, &ev);
	f = ev_field(&ev, "raw");
	CHECK(f && f->value == raw && f->value_len == DEAD_RAW_MAX);
	f = ev_field(&ev, "raw_truncated");
	CHECK(f && f->value_len == 4 && memcmp(f->value, "true", 4) == 0);
	f = ev_field(&ev, "raw_bytes");
	CHECK(f && f->value_len == 7 && memcmp(f->value, "3145728", 7) == 0);
	CHECK(ev_field(&ev, "slot") && ev_field(&ev, "_lsn") && ev_field(&ev, "_xid"));
	CHECK_MEM(ev.fields[0].name, ev.fields[0].name_len, "reason");
	CHECK_MEM(ev.fields[1].name, ev.fields[1].name_len, "raw");
	CHECK_INT(mapper_map(m, &tx, 2, nullid, 2, raw, big, &ev, &reason), MAP_DEAD_LETTER);
	CHECK_INT(ev_field(&ev, "raw")->value_len, DEAD_RAW_MAX);
	CHECK(ev_field(&ev, "raw_truncated") != NULL);
	/* A UTF-8 character across the cut is dropped whole ("é" at 65535-65536). */
	raw[DEAD_RAW_MAX - 1] = '\xc3';
	raw[DEAD_RAW_MAX] = '\xa9';
	mapper_dead_letter(m, &tx, 3, DEAD_OTHER, "why", raw, big, &ev);
	CHECK_INT(ev_field(&ev, "raw")->value_len, DEAD_RAW_MAX - 1);
	/* A 4-byte one: cut before its lead byte. */
	memcpy(raw + DEAD_RAW_MAX - 2, "\xf0\x9f\x98\x80", 4);
	mapper_dead_letter(m, &tx, 4, DEAD_OTHER, "why", raw, big, &ev);
	CHECK_INT(ev_field(&ev, "raw")->value_len, DEAD_RAW_MAX - 2);
	free(raw);
	mapper_destroy(m);
}

int main(void)
{
	RUN(template_default);
	RUN(template_fixed_and_escapes);
	RUN(template_errors);
	RUN(template_render_failures);
	RUN(hash_tags);
	RUN(map_row);
	RUN(map_dead_letters);
	RUN(map_id_format_and_text_payload);
	RUN(mapper_rejects_bad_template);
	RUN(render_control_bytes);
	RUN(stream_name_rules);
	RUN(map_field_limit);
	RUN(dead_letter_raw_cap);
	return test_done();
}
