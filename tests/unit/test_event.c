/*
 * test_event.c - stream templates, hash tags and row-to-event mapping.
 */
#include "buf.h"
#include "event.h"
#include "test.h"

static struct w2j_field col(const char *name, enum w2j_kind kind, const char *value)
{
	return (struct w2j_field){name, strlen(name), "text", 4, kind, value, value ? strlen(value) : 0};
}

static const char *render(const char *spec, const struct w2j_field *f, size_t n, const char **reason)
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
	struct w2j_field f[] = {col("aggregate_type", W2J_KIND_NULL, NULL), col("e", W2J_KIND_STRING, "")};
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
		col("id", W2J_KIND_STRING, "e-1"),
		col("aggregate_type", W2J_KIND_STRING, "order"),
		col("note", W2J_KIND_NULL, NULL),
		col("payload", W2J_KIND_STRING, "{\"a\": 1}"),
		col("n", W2J_KIND_NUMBER, "12.5000"),
	};
	struct txn_info tx = {.commit_lsn = 0x1522408, .has_xid = true, .xid = 739,
			      .committed_at = "2026-11-21 23:51:54.887293+00", .committed_at_len = 29};
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
	struct w2j_field nullid[] = {col("id", W2J_KIND_NULL, NULL), col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field emptyid[] = {col("id", W2J_KIND_STRING, ""), col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field noroute[] = {col("id", W2J_KIND_STRING, "x"), col("aggregate_type", W2J_KIND_NULL, NULL)};
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
	struct w2j_field notuuid[] = {col("id", W2J_KIND_STRING, "42"), col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field isuuid[] = {col("id", W2J_KIND_STRING, "6F0C2A55-8f1e-4c0b-9c7e-6c2f9f3b1a10"),
				     col("aggregate_type", W2J_KIND_STRING, "o")};
	struct w2j_field badjson[] = {col("id", W2J_KIND_STRING, "x"), col("aggregate_type", W2J_KIND_STRING, "o"),
				      col("payload", W2J_KIND_STRING, "not json")};
	struct w2j_field okjson[] = {col("id", W2J_KIND_STRING, "x"), col("aggregate_type", W2J_KIND_STRING, "o"),
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
	return test_done();
}
