/*
 * test_wal2json.c - unit tests for lib/wal2json.c.
 *
 * Drives the decoder with real-looking wal2json 2.5 format-version 2 lines
 * from tests/fixtures/wal2json/ (one object per line, as each XLogData
 * payload would carry them) and with inline inputs for escapes, numbers,
 * malformed text and decoder reuse.
 */
#include "wal2json.h"
#include "test.h"

#include <stdbool.h>
#include <stdint.h>

#ifndef FIXTURES_DIR
#error "FIXTURES_DIR must be defined (absolute path of tests/fixtures)"
#endif

#define FIXTURE_SUBDIR "wal2json"
#include "fixture.h"

/* Decode a NUL-terminated string. */
static bool dec(struct w2j_decoder *d, const char *s, struct w2j_change *c)
{
	return w2j_decode(d, s, strlen(s), c);
}

/* The error message is non-empty and one line. */
static bool good_errmsg(const struct w2j_decoder *d)
{
	const char *m = w2j_errmsg(d);

	return m && m[0] != '\0' && strchr(m, '\n') == NULL && strchr(m, '\r') == NULL;
}

/* Check a column by name/type/kind/value; want_type/want_value may be NULL. */
static bool col_is(const struct w2j_field *f, const char *name, const char *type,
                   enum w2j_kind kind, const char *value)
{
	if (!f->name || f->name_len != strlen(name) || memcmp(f->name, name, f->name_len) != 0 ||
	    f->name[f->name_len] != '\0')
		return false;
	if (type) {
		if (!f->type || f->type_len != strlen(type) || strcmp(f->type, type) != 0)
			return false;
	} else if (f->type || f->type_len) {
		return false;
	}
	if (f->kind != kind)
		return false;
	if (value) {
		if (!f->value || f->value_len != strlen(value) || memcmp(f->value, value, f->value_len) ||
		    f->value[f->value_len] != '\0')
			return false;
	} else if (f->value || f->value_len) {
		return false;
	}
	return true;
}

TEST(create_destroy)
{
	struct w2j_decoder *d = w2j_create();

	CHECK(d != NULL);
	CHECK_STR(w2j_errmsg(d), "");
	w2j_destroy(d);
	w2j_destroy(NULL);
}

TEST(fixture_begin_insert_commit)
{
	struct w2j_decoder *d = w2j_create();
	struct lines ls;
	struct w2j_change c;
	lsn_t lsn;

	CHECK(read_fixture("txn_insert.jsonl", &ls));
	CHECK_INT(ls.n, 3);
	if (ls.n != 3)
		goto out;

	CHECK(w2j_decode(d, ls.line[0], ls.len[0], &c));
	CHECK_INT(c.action, W2J_BEGIN);
	CHECK(c.has_xid);
	CHECK_INT(c.xid, 741);
	CHECK(lsn_parse("0/151DF78", 9, &lsn) && c.lsn == lsn);
	CHECK(lsn_parse("0/151DFA8", 9, &lsn) && c.nextlsn == lsn);
	CHECK_MEM(c.timestamp, c.timestamp_len, "2026-11-21 23:51:54.887293+00");
	CHECK_STR(c.timestamp, "2026-11-21 23:51:54.887293+00");
	CHECK(c.schema == NULL && c.table == NULL);
	CHECK(c.columns == NULL);
	CHECK_INT(c.ncolumns, 0);
	CHECK(c.prefix == NULL && c.content == NULL);

	CHECK(w2j_decode(d, ls.line[1], ls.len[1], &c));
	CHECK_INT(c.action, W2J_INSERT);
	CHECK(c.has_xid);
	CHECK_INT(c.xid, 741);
	CHECK_INT(c.lsn, 0x151DCB8);
	CHECK_INT(c.nextlsn, LSN_INVALID);
	CHECK_MEM(c.schema, c.schema_len, "public");
	CHECK_MEM(c.table, c.table_len, "outbox");
	CHECK_STR(c.table, "outbox");
	CHECK_INT(c.ncolumns, 8);
	if (c.ncolumns == 8) {
		CHECK(col_is(&c.columns[0], "id", "bigint", W2J_KIND_NUMBER, "1"));
		CHECK(col_is(&c.columns[1], "payload", "jsonb", W2J_KIND_STRING,
		             "{\"a\": 1, \"s\": \"q\\\"uote\"}"));
		CHECK(col_is(&c.columns[2], "b", "bytea", W2J_KIND_STRING, "deadbeef"));
		CHECK(col_is(&c.columns[3], "n", "numeric(12,4)", W2J_KIND_NUMBER, "12.5000"));
		CHECK(col_is(&c.columns[4], "f", "double precision", W2J_KIND_NULL, NULL));
		CHECK(col_is(&c.columns[5], "flag", "boolean", W2J_KIND_BOOL, "true"));
		CHECK(col_is(&c.columns[6], "tags", "text[]", W2J_KIND_STRING, "{x,\"y z\"}"));
		CHECK(col_is(&c.columns[7], "ts", "timestamp with time zone", W2J_KIND_STRING,
		             "2026-11-21 23:51:54.886854+00"));
	}

	CHECK(w2j_decode(d, ls.line[2], ls.len[2], &c));
	CHECK_INT(c.action, W2J_COMMIT);
	CHECK_INT(c.xid, 741);
	CHECK_INT(c.lsn, 0x151DF78);
	CHECK_INT(c.nextlsn, 0x151DFA8);
	CHECK_INT(c.ncolumns, 0);
	CHECK(c.schema == NULL);
out:
	free_fixture(&ls);
	w2j_destroy(d);
}

TEST(fixture_messages)
{
	struct w2j_decoder *d = w2j_create();
	struct lines ls;
	struct w2j_change c;

	CHECK(read_fixture("messages.jsonl", &ls));
	CHECK_INT(ls.n, 4);
	if (ls.n != 4)
		goto out;

	CHECK(w2j_decode(d, ls.line[0], ls.len[0], &c));
	CHECK_INT(c.action, W2J_BEGIN);
	CHECK_INT(c.xid, 742);

	/* transactional message */
	CHECK(w2j_decode(d, ls.line[1], ls.len[1], &c));
	CHECK_INT(c.action, W2J_MESSAGE);
	CHECK(c.has_xid);
	CHECK_INT(c.xid, 742);
	CHECK_STR(c.timestamp, "2026-11-21 23:52:10.104512+00");
	CHECK_INT(c.lsn, 0x151E0A0);
	CHECK(c.transactional);
	CHECK_MEM(c.prefix, c.prefix_len, "outbox");
	CHECK_MEM(c.content, c.content_len,
	          "{\"event\":\"order.created\",\"order_id\":42,\"total\":\"19.90\"}");
	CHECK(c.schema == NULL && c.table == NULL && c.ncolumns == 0);

	CHECK(w2j_decode(d, ls.line[2], ls.len[2], &c));
	CHECK_INT(c.action, W2J_COMMIT);
	CHECK_INT(c.nextlsn, 0x151E0E8);

	/* non-transactional message: xid and timestamp are null */
	CHECK(w2j_decode(d, ls.line[3], ls.len[3], &c));
	CHECK_INT(c.action, W2J_MESSAGE);
	CHECK(!c.has_xid);
	CHECK(c.timestamp == NULL);
	CHECK_INT(c.timestamp_len, 0);
	CHECK_INT(c.lsn, 0x151E130);
	CHECK(!c.transactional);
	CHECK_MEM(c.prefix, c.prefix_len, "heartbeat");
	CHECK(c.content != NULL);
	CHECK_INT(c.content_len, 0);
	CHECK_STR(c.content, "");
out:
	free_fixture(&ls);
	w2j_destroy(d);
}

TEST(fixture_update_delete_truncate)
{
	struct w2j_decoder *d = w2j_create();
	struct lines ls;
	struct w2j_change c;

	CHECK(read_fixture("changes.jsonl", &ls));
	CHECK_INT(ls.n, 3);
	if (ls.n != 3)
		goto out;

	/* UPDATE: columns is the new tuple, identity is skipped */
	CHECK(w2j_decode(d, ls.line[0], ls.len[0], &c));
	CHECK_INT(c.action, W2J_UPDATE);
	CHECK_INT(c.xid, 743);
	CHECK_INT(c.lsn, 0x151E1A0);
	CHECK_STR(c.schema, "public");
	CHECK_STR(c.table, "outbox");
	CHECK_INT(c.ncolumns, 3);
	if (c.ncolumns == 3) {
		CHECK(col_is(&c.columns[0], "id", "bigint", W2J_KIND_NUMBER, "2"));
		CHECK(col_is(&c.columns[1], "status", "text", W2J_KIND_STRING, "sent"));
		CHECK(col_is(&c.columns[2], "attempts", "integer", W2J_KIND_NUMBER, "3"));
	}

	/* DELETE: only identity, so no columns */
	CHECK(w2j_decode(d, ls.line[1], ls.len[1], &c));
	CHECK_INT(c.action, W2J_DELETE);
	CHECK_STR(c.schema, "public");
	CHECK_STR(c.table, "t");
	CHECK_INT(c.ncolumns, 0);
	CHECK(c.columns == NULL);

	CHECK(w2j_decode(d, ls.line[2], ls.len[2], &c));
	CHECK_INT(c.action, W2J_TRUNCATE);
	CHECK_INT(c.xid, 744);
	CHECK_STR(c.table, "table_truncate_1");
	CHECK_INT(c.ncolumns, 0);
out:
	free_fixture(&ls);
	w2j_destroy(d);
}

TEST(fixture_minimal_options)
{
	struct w2j_decoder *d = w2j_create();
	struct lines ls;
	struct w2j_change c;

	CHECK(read_fixture("minimal.jsonl", &ls));
	CHECK_INT(ls.n, 3);
	if (ls.n != 3)
		goto out;

	CHECK(w2j_decode(d, ls.line[0], ls.len[0], &c));
	CHECK_INT(c.action, W2J_BEGIN);
	CHECK(!c.has_xid);
	CHECK_INT(c.lsn, LSN_INVALID);
	CHECK_INT(c.nextlsn, LSN_INVALID);
	CHECK(c.timestamp == NULL);

	/* include-types off: no "type" */
	CHECK(w2j_decode(d, ls.line[1], ls.len[1], &c));
	CHECK_INT(c.action, W2J_INSERT);
	CHECK(!c.has_xid);
	CHECK_INT(c.ncolumns, 2);
	if (c.ncolumns == 2) {
		CHECK(col_is(&c.columns[0], "id", NULL, W2J_KIND_NUMBER, "7"));
		CHECK(col_is(&c.columns[1], "topic", NULL, W2J_KIND_STRING, "orders"));
	}

	CHECK(w2j_decode(d, ls.line[2], ls.len[2], &c));
	CHECK_INT(c.action, W2J_COMMIT);
out:
	free_fixture(&ls);
	w2j_destroy(d);
}

TEST(fixture_extra_keys_ignored)
{
	struct w2j_decoder *d = w2j_create();
	struct lines ls;
	struct w2j_change c;

	CHECK(read_fixture("extra_keys.jsonl", &ls));
	CHECK_INT(ls.n, 1);
	if (ls.n != 1)
		goto out;
	CHECK(w2j_decode(d, ls.line[0], ls.len[0], &c));
	CHECK_INT(c.action, W2J_INSERT);
	CHECK_INT(c.xid, 745);
	CHECK_INT(c.ncolumns, 2);
	if (c.ncolumns == 2) {
		CHECK(col_is(&c.columns[0], "id", "bigint", W2J_KIND_NUMBER, "8"));
		CHECK(col_is(&c.columns[1], "note", "text", W2J_KIND_STRING, "x"));
	}
out:
	free_fixture(&ls);
	w2j_destroy(d);
}

TEST(fixture_escapes)
{
	struct w2j_decoder *d = w2j_create();
	struct lines ls;
	struct w2j_change c;

	CHECK(read_fixture("escapes.jsonl", &ls));
	CHECK_INT(ls.n, 1);
	if (ls.n != 1)
		goto out;
	CHECK(w2j_decode(d, ls.line[0], ls.len[0], &c));
	CHECK_INT(c.ncolumns, 4);
	if (c.ncolumns == 4) {
		CHECK(col_is(&c.columns[1], "body", "text", W2J_KIND_STRING,
		             "line1\nline2\ttab \"quoted\" back\\slash \x01 caf\xc3\xa9 \xc3\xa9 "
		             "\xf0\x9f\x98\x80"));
		/* a json column: unescaped once, its own escapes are left alone */
		CHECK(col_is(&c.columns[2], "doc", "json", W2J_KIND_STRING,
		             "{\"s\": \"\\u00e9\\ud83d\\ude00\", \"p\": \"a/b\"}"));
		CHECK(col_is(&c.columns[3], "Weird \"Col\"", "\"MyType\"", W2J_KIND_STRING, "x"));
	}
out:
	free_fixture(&ls);
	w2j_destroy(d);
}

/* One INSERT with a single column whose raw JSON value is val. */
static bool decode_value(struct w2j_decoder *d, const char *val, struct w2j_change *c)
{
	char buf[1024];

	snprintf(buf, sizeof(buf),
	         "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\","
	         "\"columns\":[{\"name\":\"v\",\"type\":\"text\",\"value\":%s}]}",
	         val);
	return dec(d, buf, c) && c->ncolumns == 1;
}

TEST(escapes)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	CHECK(decode_value(d, "\"a\\\"b\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "a\"b");
	CHECK(decode_value(d, "\"a\\\\b\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "a\\b");
	CHECK(decode_value(d, "\"a\\nb\\tc\\rd\\be\\ff\\/g\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "a\nb\tc\rd\be\ff/g");
	CHECK(decode_value(d, "\"caf\\u00e9\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "caf\xc3\xa9");
	CHECK(decode_value(d, "\"\\u20ac\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "\xe2\x82\xac");
	/* surrogate pair: U+1F600 */
	CHECK(decode_value(d, "\"x\\ud83d\\ude00y\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "x\xf0\x9f\x98\x80y");
	CHECK(decode_value(d, "\"\"", &c));
	CHECK_INT(c.columns[0].kind, W2J_KIND_STRING);
	CHECK(c.columns[0].value != NULL);
	CHECK_INT(c.columns[0].value_len, 0);
	w2j_destroy(d);
}

TEST(nul_inside_value)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;
	const struct w2j_field *f;

	CHECK(decode_value(d, "\"ab\\u0000cd\\u0000\"", &c));
	f = &c.columns[0];
	CHECK_INT(f->value_len, 6);
	CHECK(memcmp(f->value, "ab\0cd\0", 7) == 0); /* incl. the terminating NUL */

	/* and in a top-level string */
	CHECK(dec(d,
	          "{\"action\":\"M\",\"transactional\":false,\"prefix\":\"p\\u0000q\","
	          "\"content\":\"\\u0000\"}",
	          &c));
	CHECK_INT(c.prefix_len, 3);
	CHECK(memcmp(c.prefix, "p\0q", 4) == 0);
	CHECK_INT(c.content_len, 1);
	CHECK(c.content[0] == '\0' && c.content[1] == '\0');
	w2j_destroy(d);
}

TEST(unicode_raw)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	CHECK(decode_value(d, "\"h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len,
	          "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");
	CHECK(dec(d, "{\"action\":\"T\",\"schema\":\"sch\xc3\xa9ma\",\"table\":\"\xe8\xa1\xa8\"}", &c));
	CHECK_STR(c.schema, "sch\xc3\xa9ma");
	CHECK_STR(c.table, "\xe8\xa1\xa8");
	/* Bytes pass through verbatim: PostgreSQL vouches for the database
	 * encoding, which may be LATIN1 ("\xe9" is é there). */
	CHECK(decode_value(d, "\"caf\xe9 \xff\xfe\"", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "caf\xe9 \xff\xfe");
	w2j_destroy(d);
}

TEST(numerics_verbatim)
{
	static const char *const nums[] = {
	    "12.5000",
	    "123456789012345678901234567890",
	    "-0.0",
	    "1e400",
	    "-1.5E-10",
	    "0",
	    "-9223372036854775809",
	    "3.141592653589793238462643383279",
	};
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		CHECK(decode_value(d, nums[i], &c));
		CHECK_INT(c.columns[0].kind, W2J_KIND_NUMBER);
		CHECK_MEM(c.columns[0].value, c.columns[0].value_len, nums[i]);
		CHECK_STR(c.columns[0].value, nums[i]);
	}
	w2j_destroy(d);
}

TEST(null_and_bool_values)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	CHECK(decode_value(d, "null", &c));
	CHECK_INT(c.columns[0].kind, W2J_KIND_NULL);
	CHECK(c.columns[0].value == NULL);
	CHECK_INT(c.columns[0].value_len, 0);
	CHECK(decode_value(d, "false", &c));
	CHECK_INT(c.columns[0].kind, W2J_KIND_BOOL);
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "false");
	CHECK(decode_value(d, "true", &c));
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "true");
	/* "type": null counts as absent */
	CHECK(
	    dec(d, "{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"type\":null,\"value\":1}]}", &c));
	CHECK(c.ncolumns == 1 && c.columns[0].type == NULL && c.columns[0].type_len == 0);
	/* "xid": null */
	CHECK(dec(d,
	          "{\"action\":\"M\",\"xid\":null,\"transactional\":false,\"prefix\":\"\","
	          "\"content\":\"\"}",
	          &c));
	CHECK(!c.has_xid);
	w2j_destroy(d);
}

TEST(jsonb_value_escaped_once)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;
	const char *line = "{\"action\":\"I\",\"columns\":[{\"name\":\"payload\",\"type\":\"jsonb\","
	                   "\"value\":\"{\\\"a\\\": 1, \\\"s\\\": \\\"q\\\\\\\"uote\\\"}\"}]}";
	struct w2j_field *fields;
	size_t n;

	CHECK(dec(d, line, &c));
	CHECK(c.ncolumns == 1);
	CHECK_MEM(c.columns[0].value, c.columns[0].value_len, "{\"a\": 1, \"s\": \"q\\\"uote\"}");

	/*
	 * and the unescaped text is itself a JSON object we can decode, passing
	 * the decoder's own output straight back in
	 */
	CHECK(w2j_decode_object(d, c.columns[0].value, c.columns[0].value_len, &fields, &n));
	CHECK_INT(n, 2);
	if (n == 2) {
		CHECK(col_is(&fields[0], "a", NULL, W2J_KIND_NUMBER, "1"));
		CHECK(col_is(&fields[1], "s", NULL, W2J_KIND_STRING, "q\"uote"));
	}
	w2j_destroy(d);
}

TEST(huge_payload)
{
	const size_t big = 5u * 1024 * 1024;
	const char *head = "{\"action\":\"I\",\"xid\":1,\"schema\":\"public\",\"table\":\"outbox\","
	                   "\"columns\":[{\"name\":\"id\",\"type\":\"bigint\",\"value\":1},"
	                   "{\"name\":\"payload\",\"type\":\"text\",\"value\":\"";
	const char *tail = "\\\"end\\u00e9\"}]}";
	size_t hl = strlen(head), tl = strlen(tail), len = hl + big + tl;
	char *buf = malloc(len + 1);
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	CHECK(buf != NULL);
	if (!buf)
		goto out;
	memcpy(buf, head, hl);
	for (size_t i = 0; i < big; i++)
		buf[hl + i] = (char)('a' + i % 26);
	memcpy(buf + hl + big, tail, tl + 1);

	for (int round = 0; round < 2; round++) {
		CHECK(w2j_decode(d, buf, len, &c));
		CHECK_INT(c.ncolumns, 2);
		if (c.ncolumns != 2)
			break;
		/* 5 MiB of letters, then "end and e-acute */
		CHECK_INT(c.columns[1].value_len, big + 4 + 2);
		CHECK(memcmp(c.columns[1].value, "abcdef", 6) == 0);
		CHECK(memcmp(c.columns[1].value + big, "\"end\xc3\xa9", 7) == 0);
		CHECK(c.columns[1].value[big - 1] == (char)('a' + (big - 1) % 26));
		CHECK(c.columns[1].value[c.columns[1].value_len] == '\0');
		CHECK(col_is(&c.columns[0], "id", "bigint", W2J_KIND_NUMBER, "1"));
	}
	/* a small line after the huge one */
	CHECK(dec(d, "{\"action\":\"C\",\"xid\":1}", &c));
	CHECK_INT(c.action, W2J_COMMIT);
	CHECK_INT(c.ncolumns, 0);
out:
	free(buf);
	w2j_destroy(d);
}

TEST(malformed_inputs)
{
	static const char *const bad[] = {
	    "",
	    "   ",
	    "{\"action\":\"B\"",                                            /* truncated */
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"value\":\"x", /* truncated */
	    "{\"action\":\"B\"} x",                                         /* trailing garbage */
	    "{\"action\":\"B\"}{\"action\":\"C\"}",                         /* two objects */
	    "{\"action\":\"B\"}\n{\"action\":\"C\"}",
	    "[{\"action\":\"B\"}]", /* not an object */
	    "\"B\"",
	    "42",
	    "null",
	    "true",
	    "{}", /* missing action */
	    "{\"xid\":1}",
	    "{\"action\":\"X\"}",
	    "{\"action\":\"BB\"}",
	    "{\"action\":\"\"}",
	    "{\"action\":null}",
	    "{\"action\":[\"B\"]}",
	    "{\"action\":\"B\",\"lsn\":\"zz\"}",
	    "{\"action\":\"B\",\"lsn\":\"0/\"}",
	    "{\"action\":\"B\",\"nextlsn\":\"1/2/3\"}",
	    "{\"action\":\"B\",\"lsn\":12}",
	    "{\"action\":\"B\",\"xid\":4294967296}", /* xid overflow */
	    "{\"action\":\"B\",\"xid\":-1}",
	    "{\"action\":\"B\",\"xid\":1.5}",
	    "{\"action\":\"B\",\"xid\":\"7\"}",
	    "{\"action\":\"B\",\"xid\":99999999999999999999999}",
	    "{\"action\":\"I\",\"columns\":{}}", /* columns not array */
	    "{\"action\":\"I\",\"columns\":\"x\"}",
	    "{\"action\":\"I\",\"columns\":null}",
	    "{\"action\":\"I\",\"columns\":[1]}",
	    "{\"action\":\"I\",\"columns\":[[]]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"value\":{\"x\":1}}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"value\":[1]}]}",
	    "{\"action\":\"I\",\"columns\":[{\"value\":1}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"a\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":1,\"value\":1}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"type\":5,\"value\":1}]}",
	    "{\"action\":\"I\",\"schema\":1}",
	    "{\"action\":\"M\",\"transactional\":\"yes\"}",
	    "{\"action\":\"M\",\"timestamp\":{}}",
	    "{\"action\":\"B\",}",
	    "{'action':'B'}",
	    "{\"action\":\"B\" /* c */}",
	    "{\"action\":\"B\",\"s\":\"a\x01\"}", /* raw control char */
	    "{\"action\":\"B\",\"s\":\"\\x\"}",
	    "{\"action\":\"B\",\"s\":\"\\u12\"}",
	};
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c, sentinel;

	memset(&sentinel, 0x5a, sizeof(sentinel));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c = sentinel;
		if (dec(d, bad[i], &c)) {
			printf("# accepted: %s\n", bad[i]);
			CHECK(!"malformed input accepted");
			continue;
		}
		if (!good_errmsg(d))
			printf("# bad message for %s: \"%s\"\n", bad[i], w2j_errmsg(d));
		CHECK(good_errmsg(d));
		/* *ret is not written on failure */
		CHECK(memcmp(&c, &sentinel, sizeof(c)) == 0);
	}
	/* NULL buffer with zero length */
	CHECK(!w2j_decode(d, NULL, 0, &c));
	CHECK(good_errmsg(d));
	/* a valid line still decodes afterwards */
	CHECK(dec(d, "{\"action\":\"C\"}", &c));
	CHECK_STR(w2j_errmsg(d), "");
	w2j_destroy(d);
}

TEST(error_messages)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;
	const char *m;

	CHECK(!dec(d, "{\"action\":\"B\",x}", &c));
	CHECK_STR(w2j_errmsg(d), "invalid JSON at byte 15: lexical error: invalid char in json text");
	CHECK(!dec(d, "{\"action\":\"B\"", &c));
	CHECK_STR(w2j_errmsg(d), "invalid JSON at byte 13: parse error: premature EOF");
	CHECK(!dec(d, "{\"action\":\"B\"} x", &c));
	CHECK_STR(w2j_errmsg(d), "invalid JSON at byte 16: parse error: trailing garbage");
	CHECK(!dec(d, "", &c));
	CHECK_STR(w2j_errmsg(d), "invalid JSON at byte 0: parse error: premature EOF");
	CHECK(!dec(d, "{\"xid\":1}", &c));
	CHECK_STR(w2j_errmsg(d), "missing \"action\"");
	CHECK(!dec(d, "{\"action\":\"X\"}", &c));
	CHECK_STR(w2j_errmsg(d), "unknown action \"X\"");
	CHECK(!dec(d, "{\"action\":\"B\",\"lsn\":\"zz\"}", &c));
	CHECK_STR(w2j_errmsg(d), "invalid \"lsn\" value \"zz\"");
	CHECK(!dec(d, "{\"action\":\"B\",\"nextlsn\":\"0/G\"}", &c));
	CHECK_STR(w2j_errmsg(d), "invalid \"nextlsn\" value \"0/G\"");
	CHECK(!dec(d, "{\"action\":\"I\",\"columns\":{}}", &c));
	CHECK_STR(w2j_errmsg(d), "\"columns\" is not an array");
	CHECK(!dec(d, "{\"action\":\"B\",\"xid\":4294967296}", &c));
	CHECK_STR(w2j_errmsg(d), "invalid \"xid\" value \"4294967296\"");
	CHECK(!dec(d, "[1]", &c));
	CHECK_STR(w2j_errmsg(d), "JSON text is not an object");
	CHECK(!dec(d, "{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"value\":{}}]}", &c));
	CHECK_STR(w2j_errmsg(d), "column value is an object or array");
	CHECK(!dec(d, "{\"action\":\"I\",\"columns\":[{\"name\":\"a\"}]}", &c));
	CHECK_STR(w2j_errmsg(d), "column \"a\" without \"value\"");

	/* offending text is quoted on one line, cut when long */
	CHECK(!dec(d, "{\"action\":\"line\\nbreak and a very long text that goes on and on and on\"}",
	           &c));
	m = w2j_errmsg(d);
	CHECK(good_errmsg(d));
	CHECK(strncmp(m, "unknown action \"line?break", 26) == 0);
	CHECK(strlen(m) < 80);
	CHECK(strstr(m, "...\"") != NULL);
	w2j_destroy(d);
}

TEST(xid_range)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	CHECK(dec(d, "{\"action\":\"B\",\"xid\":4294967295}", &c));
	CHECK(c.has_xid);
	CHECK(c.xid == UINT32_MAX);
	CHECK(dec(d, "{\"action\":\"B\",\"xid\":0}", &c));
	CHECK(c.has_xid);
	CHECK_INT(c.xid, 0);
	CHECK(!dec(d, "{\"action\":\"B\",\"xid\":4294967296}", &c));
	CHECK(!dec(d, "{\"action\":\"B\",\"xid\":1e3}", &c));
	w2j_destroy(d);
}

TEST(lsn_values)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	CHECK(dec(d, "{\"action\":\"C\",\"lsn\":\"FFFFFFFF/FFFFFFFF\",\"nextlsn\":\"a/b\"}", &c));
	CHECK(c.lsn == UINT64_MAX);
	CHECK(c.nextlsn == (((lsn_t)0xa << 32) | 0xb));
	CHECK(!dec(d, "{\"action\":\"C\",\"lsn\":\"100000000/0\"}", &c));
	CHECK(!dec(d, "{\"action\":\"C\",\"lsn\":\"\"}", &c));
	w2j_destroy(d);
}

TEST(unknown_keys_skipped)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	/* unknown keys anywhere, including nested containers named like known keys */
	CHECK(dec(d,
	          "{\"zz\":{\"action\":\"X\",\"columns\":[1,2]},\"action\":\"I\","
	          "\"identity\":[{\"name\":\"id\",\"value\":{\"odd\":[]}}],"
	          "\"columns\":[{\"name\":\"a\",\"value\":1,\"extra\":{\"value\":[9]}}],"
	          "\"pk\":[],\"new\":[[[]],{}],\"n\":null,\"b\":true,\"s\":\"x\",\"f\":1.0}",
	          &c));
	CHECK_INT(c.action, W2J_INSERT);
	CHECK_INT(c.ncolumns, 1);
	if (c.ncolumns == 1)
		CHECK(col_is(&c.columns[0], "a", NULL, W2J_KIND_NUMBER, "1"));
	/* whitespace and key order do not matter */
	CHECK(dec(d, " \n\t{ \"table\" : \"t\" ,\r\n \"action\" : \"D\" } \n", &c));
	CHECK_INT(c.action, W2J_DELETE);
	CHECK_STR(c.table, "t");
	w2j_destroy(d);
}

TEST(decoder_reuse)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;
	char buf[4096];
	bool ok = true;

	/* a rich change first, then a bare one: nothing may leak through */
	CHECK(dec(d,
	          "{\"action\":\"I\",\"xid\":5,\"timestamp\":\"ts\",\"lsn\":\"0/10\","
	          "\"schema\":\"s\",\"table\":\"t\",\"columns\":[{\"name\":\"a\",\"value\":1}]}",
	          &c));
	CHECK(
	    dec(d, "{\"action\":\"M\",\"transactional\":true,\"prefix\":\"p\",\"content\":\"c\"}", &c));
	CHECK(!c.has_xid);
	CHECK(c.timestamp == NULL);
	CHECK_INT(c.lsn, LSN_INVALID);
	CHECK(c.schema == NULL && c.table == NULL);
	CHECK(c.columns == NULL && c.ncolumns == 0);
	CHECK(c.transactional);
	CHECK(dec(d, "{\"action\":\"B\"}", &c));
	CHECK(!c.transactional);
	CHECK(c.prefix == NULL && c.content == NULL);

	/* many calls with growing and shrinking column counts */
	for (int i = 0; i < 20000 && ok; i++) {
		int ncols = (i * 7) % 40;
		size_t len;

		len = (size_t)snprintf(
		    buf, sizeof(buf), "{\"action\":\"I\",\"xid\":%d,\"table\":\"t%d\",\"columns\":[", i, i);
		for (int j = 0; j < ncols; j++)
			len += (size_t)snprintf(buf + len, sizeof(buf) - len,
			                        "%s{\"name\":\"c%d\",\"value\":\"v%d_%d\"}", j ? "," : "", j, i,
			                        j);
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "]}");
		if (!w2j_decode(d, buf, len, &c)) {
			printf("# call %d failed: %s\n", i, w2j_errmsg(d));
			ok = false;
			break;
		}
		if (c.xid != (uint32_t)i || (int)c.ncolumns != ncols) {
			ok = false;
			break;
		}
		{
			char want[32];

			snprintf(want, sizeof(want), "t%d", i);
			if (strcmp(c.table, want) != 0)
				ok = false;
			for (int j = 0; j < ncols && ok; j++) {
				snprintf(want, sizeof(want), "v%d_%d", i, j);
				if (strcmp(c.columns[j].value, want) != 0 || c.columns[j].value_len != strlen(want))
					ok = false;
			}
		}
		/* every tenth call, a failure in between must not disturb the next */
		if (i % 10 == 0 && dec(d, "{\"action\":\"I\",\"columns\":[{\"name\":\"x\"", &c))
			ok = false;
	}
	CHECK(ok);
	w2j_destroy(d);
}

TEST(object_flat)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_field *f;
	size_t n;
	const char *content = "{\"event\":\"order.created\",\"id\":42,\"amount\":19.90,\"big\":"
	                      "123456789012345678901234567890,\"ok\":true,\"no\":false,"
	                      "\"gone\":null,\"meta\":{ \"a\" : [1, 2.50, {\"z\":null}], "
	                      "\"s\" : \"q\\\"x\\u00e9\\n\\u0000\" },\"tags\":[\"x\", \"y\"],"
	                      "\"empty_o\":{},\"empty_a\":[],\"esc\\u00e9\":\"\\t\"}";

	CHECK(w2j_decode_object(d, content, strlen(content), &f, &n));
	CHECK_INT(n, 12);
	if (n == 12) {
		CHECK(col_is(&f[0], "event", NULL, W2J_KIND_STRING, "order.created"));
		CHECK(col_is(&f[1], "id", NULL, W2J_KIND_NUMBER, "42"));
		CHECK(col_is(&f[2], "amount", NULL, W2J_KIND_NUMBER, "19.90"));
		CHECK(col_is(&f[3], "big", NULL, W2J_KIND_NUMBER, "123456789012345678901234567890"));
		CHECK(col_is(&f[4], "ok", NULL, W2J_KIND_BOOL, "true"));
		CHECK(col_is(&f[5], "no", NULL, W2J_KIND_BOOL, "false"));
		CHECK(col_is(&f[6], "gone", NULL, W2J_KIND_NULL, NULL));
		CHECK(col_is(&f[7], "meta", NULL, W2J_KIND_JSON,
		             "{\"a\":[1,2.50,{\"z\":null}],\"s\":\"q\\\"x\xc3\xa9\\n\\u0000\"}"));
		CHECK(col_is(&f[8], "tags", NULL, W2J_KIND_JSON, "[\"x\",\"y\"]"));
		CHECK(col_is(&f[9], "empty_o", NULL, W2J_KIND_JSON, "{}"));
		CHECK(col_is(&f[10], "empty_a", NULL, W2J_KIND_JSON, "[]"));
		CHECK(col_is(&f[11], "esc\xc3\xa9", NULL, W2J_KIND_STRING, "\t"));
	}

	/* empty object, duplicate keys kept in order */
	CHECK(w2j_decode_object(d, "{}", 2, &f, &n));
	CHECK_INT(n, 0);
	CHECK(w2j_decode_object(d, "{\"k\":1,\"k\":[true]}", 18, &f, &n));
	CHECK_INT(n, 2);
	if (n == 2) {
		CHECK(col_is(&f[0], "k", NULL, W2J_KIND_NUMBER, "1"));
		CHECK(col_is(&f[1], "k", NULL, W2J_KIND_JSON, "[true]"));
	}
	w2j_destroy(d);
}

TEST(object_deep_and_large)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_field *f;
	size_t n, len = 0;
	char *buf = malloc(300000);

	CHECK(buf != NULL);
	if (!buf)
		goto out;
	/* a nested array much longer than the input reservation's slack */
	len += (size_t)sprintf(buf, "{\"arr\":[");
	for (int i = 0; i < 20000; i++)
		len += (size_t)sprintf(buf + len, "%s  %d  ", i ? "," : "", i);
	len += (size_t)sprintf(buf + len, "],\"after\":\"x\"}");
	CHECK(w2j_decode_object(d, buf, len, &f, &n));
	CHECK_INT(n, 2);
	if (n == 2) {
		CHECK(f[0].kind == W2J_KIND_JSON);
		CHECK(f[0].value_len > 100000 && f[0].value[0] == '[');
		CHECK(memcmp(f[0].value, "[0,1,2,3,", 9) == 0);
		CHECK(memcmp(f[0].value + f[0].value_len - 7, ",19999]", 7) == 0);
		CHECK(f[0].value[f[0].value_len] == '\0');
		CHECK(col_is(&f[1], "after", NULL, W2J_KIND_STRING, "x"));
	}

	/* nesting deeper than yajl_gen allows is an error, not a crash */
	len = (size_t)sprintf(buf, "{\"d\":");
	for (int i = 0; i < 200; i++)
		buf[len++] = '[';
	for (int i = 0; i < 200; i++)
		buf[len++] = ']';
	buf[len++] = '}';
	CHECK(!w2j_decode_object(d, buf, len, &f, &n));
	CHECK(good_errmsg(d));
	/* ... and the generator recovers */
	CHECK(w2j_decode_object(d, "{\"d\":[[1]]}", 11, &f, &n));
	CHECK(n == 1 && col_is(&f[0], "d", NULL, W2J_KIND_JSON, "[[1]]"));
out:
	free(buf);
	w2j_destroy(d);
}

TEST(object_rejects_non_objects)
{
	static const char *const bad[] = {
	    "[1,2]",
	    "\"str\"",
	    "42",
	    "1.5",
	    "null",
	    "true",
	    "",
	    "{",
	    "{\"a\":}",
	    "{\"a\":1} 2",
	    "{\"a\":1}{\"b\":2}",
	    "{\"a\":[1,}",
	    "nope",
	};
	struct w2j_decoder *d = w2j_create();
	struct w2j_field *f = (struct w2j_field *)(uintptr_t)0x1;
	size_t n = 77;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (w2j_decode_object(d, bad[i], strlen(bad[i]), &f, &n)) {
			printf("# accepted: %s\n", bad[i]);
			CHECK(!"non-object accepted");
		}
		CHECK(good_errmsg(d));
	}
	CHECK(f == (struct w2j_field *)(uintptr_t)0x1 && n == 77);
	CHECK(!w2j_decode_object(d, "[1,2]", 5, &f, &n));
	CHECK_STR(w2j_errmsg(d), "message content is not a JSON object");
	CHECK(!w2j_decode_object(d, "42", 2, &f, &n));
	CHECK_STR(w2j_errmsg(d), "message content is not a JSON object");
	CHECK(!w2j_decode_object(d, "\"s\"", 3, &f, &n));
	CHECK_STR(w2j_errmsg(d), "message content is not a JSON object");
	w2j_destroy(d);
}

TEST(decode_and_object_interleaved)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;
	struct w2j_field *f;
	size_t n;

	for (int i = 0; i < 100; i++) {
		CHECK(dec(d,
		          "{\"action\":\"M\",\"transactional\":true,\"prefix\":\"outbox\","
		          "\"content\":\"{\\\"k\\\":{\\\"v\\\":[1,\\\"two\\\"]},\\\"n\\\":3}\"}",
		          &c));
		CHECK_STR(c.content, "{\"k\":{\"v\":[1,\"two\"]},\"n\":3}");
		/* content points into d's arena: passing it back in must work */
		CHECK(w2j_decode_object(d, c.content, c.content_len, &f, &n));
		CHECK_INT(n, 2);
		if (n == 2) {
			CHECK(col_is(&f[0], "k", NULL, W2J_KIND_JSON, "{\"v\":[1,\"two\"]}"));
			CHECK(col_is(&f[1], "n", NULL, W2J_KIND_NUMBER, "3"));
		}
	}
	w2j_destroy(d);
}

TEST(input_from_own_output)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;
	struct w2j_field *f;
	size_t n;
	char line[4096];
	char big[1500];

	/* a message whose content is itself a wal2json line, decoded in place */
	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	snprintf(line, sizeof(line),
	         "{\"action\":\"M\",\"transactional\":false,\"prefix\":\"p\",\"content\":"
	         "\"{\\\"action\\\":\\\"I\\\",\\\"table\\\":\\\"tt\\\",\\\"columns\\\":"
	         "[{\\\"name\\\":\\\"k\\\",\\\"value\\\":\\\"%s\\\"}]}\"}",
	         big);
	CHECK(dec(d, line, &c));
	CHECK(c.content_len > sizeof(big));
	CHECK(w2j_decode(d, c.content, c.content_len, &c));
	CHECK_INT(c.action, W2J_INSERT);
	CHECK_STR(c.table, "tt");
	CHECK(c.ncolumns == 1 && c.columns[0].value_len == sizeof(big) - 1);
	CHECK(c.ncolumns == 1 && strcmp(c.columns[0].value, big) == 0);

	/* a decode_object result fed back into decode_object */
	CHECK(w2j_decode_object(d, "{\"o\":{\"p\":{\"q\":[1,\"x\"]}}}",
	                        strlen("{\"o\":{\"p\":{\"q\":[1,\"x\"]}}}"), &f, &n));
	CHECK(n == 1 && f[0].kind == W2J_KIND_JSON);
	CHECK(w2j_decode_object(d, f[0].value, f[0].value_len, &f, &n));
	CHECK(n == 1 && col_is(&f[0], "p", NULL, W2J_KIND_JSON, "{\"q\":[1,\"x\"]}"));
	CHECK(w2j_decode_object(d, f[0].value, f[0].value_len, &f, &n));
	CHECK(n == 1 && col_is(&f[0], "q", NULL, W2J_KIND_JSON, "[1,\"x\"]"));
	w2j_destroy(d);
}

/* Found by tests/fuzz: an empty message content passed straight back in. */
TEST(decode_object_empty_content_from_arena)
{
	struct w2j_decoder *d = w2j_create();
	const char *line = "{\"action\":\"M\",\"xid\":null,\"lsn\":\"0/1\",\"transactional\":false,"
	                   "\"prefix\":\"p\",\"content\":\"\"}";
	struct w2j_change ch;
	struct w2j_field *f;
	size_t n;

	CHECK(w2j_decode(d, line, strlen(line), &ch));
	CHECK_INT(ch.content_len, 0);
	CHECK(!w2j_decode_object(d, ch.content, ch.content_len, &f, &n));
	CHECK(w2j_errmsg(d)[0] != '\0');
	w2j_destroy(d);
}

/* True when a and b hold the same bytes (or are both absent). */
static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
	if (!a || !b)
		return a == b && alen == blen;
	return alen == blen && memcmp(a, b, alen) == 0;
}

/* Decode s with the fast path and with yajl alone; true when both agree. */
static bool paths_agree(struct w2j_decoder *fast, struct w2j_decoder *slow, const char *s,
                        size_t len)
{
	struct w2j_change a, b;
	bool ok = w2j_decode(fast, s, len, &a);

	if (ok != w2j_decode(slow, s, len, &b)) {
		fprintf(stderr, "# verdicts differ on %.80s: fast %s (%s)\n", s, ok ? "ok" : "fails",
		        w2j_errmsg(ok ? slow : fast));
		return false;
	}
	if (!ok) {
		if (strcmp(w2j_errmsg(fast), w2j_errmsg(slow)) == 0)
			return true;
		fprintf(stderr, "# messages differ on %.80s: \"%s\" vs \"%s\"\n", s, w2j_errmsg(fast),
		        w2j_errmsg(slow));
		return false;
	}
	if (a.action != b.action || a.xid != b.xid || a.lsn != b.lsn || a.nextlsn != b.nextlsn ||
	    !same(a.timestamp, a.timestamp_len, b.timestamp, b.timestamp_len) ||
	    !same(a.table, a.table_len, b.table, b.table_len) ||
	    !same(a.content, a.content_len, b.content, b.content_len) || a.ncolumns != b.ncolumns)
		return false;
	for (size_t i = 0; i < a.ncolumns; i++)
		if (a.columns[i].kind != b.columns[i].kind ||
		    !same(a.columns[i].name, a.columns[i].name_len, b.columns[i].name,
		          b.columns[i].name_len) ||
		    !same(a.columns[i].type, a.columns[i].type_len, b.columns[i].type,
		          b.columns[i].type_len) ||
		    !same(a.columns[i].value, a.columns[i].value_len, b.columns[i].value,
		          b.columns[i].value_len))
			return false;
	return true;
}

/*
 * The fast tokenizer must give what yajl gives, on every fixture line and on
 * inputs made to hit its edges: escapes on both sides of a 16-byte block,
 * \u escapes and control bytes (handed to yajl), numbers, literals, trailing
 * bytes, nesting deeper than the fast path's stack, truncation at every byte.
 */
TEST(fast_path_agrees_with_yajl)
{
	static const char *const files[] = {"txn_insert.jsonl", "messages.jsonl",   "changes.jsonl",
	                                    "minimal.jsonl",    "extra_keys.jsonl", "escapes.jsonl"};
	static const char *const cases[] = {
	    "{\"action\":\"I\",\"lsn\":\"0/"
	    "1\",\"columns\":[{\"name\":\"p\",\"type\":\"jsonb\",\"value\":\"{\\\"a\\\": "
	    "\\\"0123456789abc\\\\\\\"\\\"}\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":"
	    "\"0123456789abcde\\n0123456789abcdef\\t\\/\\b\\f\\r\\\\\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"\\u00e9\\ud83d\\ude00 "
	    "\\u0001\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"tab\there\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"bad \\x escape\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"n\",\"value\":-0.5e+10},{\"name\":\"m\","
	    "\"value\":12.5000},"
	    "{\"name\":\"b\",\"value\":true},{\"name\":\"c\",\"value\":false},{\"name\":\"z\","
	    "\"value\":null}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"n\",\"value\":01}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"n\",\"value\":1.}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"n\",\"value\":-}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"n\",\"value\":truex}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"n\",\"value\":nul}]}",
	    "{\"action\":\"B\",\"xid\":5} x",
	    "{\"action\":\"B\",\"xid\":5}  \n",
	    "{\"action\":\"B\",\"xid\":5,}",
	    "{\"action\":\"B\" \"xid\":5}",
	    "{\"action\":\"B\",\"xid\":5]",
	    "[1,2]",
	    "\"B\"",
	    "",
	    " { \"action\" : \"C\" , \"lsn\" : \"0/2\" , \"identity\" : [ { \"a\" : [ ] } , { } ] } ",
	    "{\"action\":\"U\",\"columns\":[],\"identity\":[{\"name\":\"i\",\"value\":1}]}",
	    "{\"action\":\"Q\"}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\"}]}",
	    "{\"action\":\"I\",\"columns\":{}}",
	};
	struct w2j_decoder *fast = w2j_create(), *slow = w2j_create();
	char deep[400];
	size_t k = 0;

	CHECK(fast && slow);
	w2j_set_fast_path(slow, false);
	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		struct lines ls;

		CHECK(read_fixture(files[f], &ls));
		for (size_t i = 0; i < ls.n; i++)
			CHECK(paths_agree(fast, slow, ls.line[i], ls.len[i]));
		free_fixture(&ls);
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i]);

		CHECK(paths_agree(fast, slow, cases[i], len));
		for (size_t cut = 0; cut < len; cut++) /* every truncation */
			CHECK(paths_agree(fast, slow, cases[i], cut));
	}
	/* w2j_decode_object(): flat and nested values, escapes, errors. */
	{
		static const char *const objs[] = {
		    "{\"id\":\"e1\",\"n\":12.50,\"ok\":true,\"none\":null,\"s\":\"a\\\"b\\\\c\\n\"}",
		    "{\"payload\":{\"a\":[1,{\"b\":\"x\\ty\"},[]],\"c\":{}},\"list\":[true,false,null,-1e3]"
		    "}",
		    "{\"u\":\"\\u00e9\"}",
		    "{\"a\":1,}",
		    "[1]",
		    "{\"a\":{\"b\":1}} trailing",
		};

		for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
			size_t len = strlen(objs[i]);

			for (size_t cut = 0; cut <= len; cut++) {
				struct w2j_field *fa, *fb;
				size_t na = 0, nb = 0;
				bool oka = w2j_decode_object(fast, objs[i], cut, &fa, &na);
				bool okb = w2j_decode_object(slow, objs[i], cut, &fb, &nb);

				CHECK(oka == okb);
				if (oka != okb)
					continue;
				if (!oka) {
					CHECK_STR(w2j_errmsg(fast), w2j_errmsg(slow));
					continue;
				}
				CHECK(na == nb);
				for (size_t j = 0; j < na && j < nb; j++)
					CHECK(fa[j].kind == fb[j].kind &&
					      same(fa[j].name, fa[j].name_len, fb[j].name, fb[j].name_len) &&
					      same(fa[j].value, fa[j].value_len, fb[j].value, fb[j].value_len));
			}
		}
	}
	/* 70 levels inside an unknown key: deeper than the fast path's stack. */
	k += (size_t)snprintf(deep, sizeof(deep), "{\"action\":\"B\",\"deep\":");
	for (int i = 0; i < 70; i++)
		deep[k++] = '[';
	for (int i = 0; i < 70; i++)
		deep[k++] = ']';
	deep[k++] = '}';
	CHECK(paths_agree(fast, slow, deep, k));
	w2j_destroy(fast);
	w2j_destroy(slow);
}

/* Decode s (len bytes) in place on a private copy with strings of min bytes
 * or more left in place; true when the result equals slow's (yajl) and the
 * in-place rules hold: values in place lie in the copy, NUL-terminated; the
 * copy changed only on success, and w2j_original() then gives its start. */
static bool inplace_agrees(struct w2j_decoder *in, struct w2j_decoder *slow, const char *s,
                           size_t len, size_t min, size_t *nplaced)
{
	struct w2j_change a, b;
	char *copy = malloc(len + 1);
	bool ok, ref_ok, good = true;
	const char *orig;
	size_t olen = 0;

	if (!copy)
		return false;
	memcpy(copy, s, len);
	copy[len] = '\0';
	w2j_set_inplace_min(in, min);
	ok = w2j_decode_inplace(in, copy, len, 100, &a);
	ref_ok = w2j_decode(slow, s, len, &b);
	orig = w2j_original(in, &olen);
	if (ok != ref_ok || (!ok && strcmp(w2j_errmsg(in), w2j_errmsg(slow)) != 0)) {
		fprintf(stderr, "# verdicts differ on %.80s: %s / %s\n", s, w2j_errmsg(in),
		        w2j_errmsg(slow));
		good = false;
	} else if (!ok || !orig) {
		good = memcmp(copy, s, len) == 0 && !orig; /* unchanged */
	} else {
		good = olen == (len < 100 ? len : 100) && memcmp(orig, s, olen) == 0;
	}
	if (good && ok) {
		good = a.action == b.action && a.ncolumns == b.ncolumns &&
		       a.transactional == b.transactional &&
		       same(a.schema, a.schema_len, b.schema, b.schema_len) &&
		       same(a.table, a.table_len, b.table, b.table_len) &&
		       same(a.prefix, a.prefix_len, b.prefix, b.prefix_len) &&
		       same(a.content, a.content_len, b.content, b.content_len);
		for (size_t i = 0; good && i < a.ncolumns; i++) {
			const struct w2j_field *f = &a.columns[i];

			good = f->kind == b.columns[i].kind &&
			       same(f->name, f->name_len, b.columns[i].name, b.columns[i].name_len) &&
			       same(f->type, f->type_len, b.columns[i].type, b.columns[i].type_len) &&
			       same(f->value, f->value_len, b.columns[i].value, b.columns[i].value_len);
			if (good && f->value && f->value >= copy && f->value < copy + len) {
				good = f->value[f->value_len] == '\0';
				(*nplaced)++;
			}
		}
	}
	free(copy);
	return good;
}

/*
 * w2j_decode_inplace() gives what yajl gives on every fixture line and every
 * truncation of inputs with escapes of each kind, with the in-place size
 * lowered so that short strings take that path; \u escapes of surrogates and
 * U+0000 (yajl's call) and bad escapes change nothing. A 200 KiB jsonb value
 * at the default size is left in place, unescaped.
 */
TEST(inplace_agrees_with_yajl)
{
	static const char *const files[] = {"txn_insert.jsonl", "messages.jsonl", "changes.jsonl",
	                                    "escapes.jsonl"};
	static const char *const cases[] = {
	    "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"outbox\",\"columns\":[{\"name\":\"p\","
	    "\"type\":\"jsonb\",\"value\":\"{\\\"a\\\": \\\"0123456789abc\\\\\\\"\\\"}\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":"
	    "\"0123456789abcde\\n0123456789abcdef\\t\\/\\b\\f\\r\\\\\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"caf\\u00e9 \\u20ac \\u0001 "
	    "\\u007f end\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"pair \\ud83d\\ude00 here\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"nul \\u0000 here\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"bad \\x escape\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"x\",\"value\":\"short \\u12 hex\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"name\":\"a\",\"value\":\"first long "
	    "value\"},{\"name\":\"b\",\"value\":\"second \\\"long\\\" value\"}]}",
	    "{\"action\":\"M\",\"transactional\":true,\"prefix\":\"outbox\",\"content\":\"{\\\"id\\\": "
	    "\\\"e1\\\", \\\"s\\\": \\\"long enough\\\"}\"}",
	    "{\"action\":\"I\",\"a long unknown key\":\"with a long \\\"value\\\"\",\"columns\":[]}",
	    /* keys after "value" and after "content": escaped keys, never in place */
	    "{\"action\":\"I\",\"columns\":[{\"value\":\"v\",\"nam\\u0065\":\"n\"}]}",
	    "{\"action\":\"I\",\"columns\":[{\"value\":\"v\",\"ty\\npe_long\":\"n\","
	    "\"name\":\"n\"}]}",
	    "{\"action\":\"M\",\"content\":\"x\",\"transactiona\\u006c\":true}",
	    "{\"action\":\"M\",\"content\":\"x\",\"pre\\u0066ix\":\"outbox\","
	    "\"transactional\":true}",
	};
	struct w2j_decoder *in = w2j_create(), *slow = w2j_create();
	size_t placed = 0, big = 200 * 1024;
	char *line;
	size_t k = 0;

	CHECK(in && slow);
	w2j_set_fast_path(slow, false);
	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		struct lines ls;

		CHECK(read_fixture(files[f], &ls));
		for (size_t i = 0; i < ls.n; i++)
			CHECK(inplace_agrees(in, slow, ls.line[i], ls.len[i], 4, &placed));
		free_fixture(&ls);
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i]);

		for (size_t cut = 0; cut <= len; cut++)
			CHECK(inplace_agrees(in, slow, cases[i], cut, 8, &placed));
	}
	printf("# %zu values left in place\n", placed);
	CHECK(placed >= 10);
	/* The default size: a jsonb value of 200 KiB with escapes stays in place. */
	line = malloc(big + 200);
	CHECK(line != NULL);
	k = (size_t)sprintf(line, "{\"action\":\"I\",\"columns\":[{\"name\":\"payload\",\"type\":"
	                          "\"jsonb\",\"value\":\"{\\\"blob\\\": \\\"");
	for (size_t i = 0; i < big; i++)
		line[k++] = i % 1000 == 999 ? 'n' : 'x';
	k += (size_t)sprintf(line + k, "\\\"}\"}]}");
	w2j_set_inplace_min(in, W2J_INPLACE_MIN);
	placed = 0;
	CHECK(inplace_agrees(in, slow, line, k, W2J_INPLACE_MIN, &placed));
	CHECK_INT(placed, 1);
	free(line);
	w2j_destroy(in);
	w2j_destroy(slow);
}

/*
 * The fast path's copy of an escaped string is sized to that string, not to
 * the rest of the message: a short escaped name and key in front of a 4 MiB
 * value left in place cost the decoder kilobytes, not another 4 MiB.
 */
TEST(unescape_copy_sized_to_its_string)
{
	const size_t big = 4u * 1024 * 1024;
	const char *head = "{\"action\":\"I\",\"columns\":[{\"na\\/me\":\"?\",\"name\":\"a\\nb\","
	                   "\"type\":\"text\",\"value\":\"";
	size_t hl = strlen(head), len = hl + big + 4;
	char *buf = malloc(len + 1);
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;

	CHECK(buf && d);
	if (!buf || !d)
		goto out;
	memcpy(buf, head, hl);
	memset(buf + hl, 'x', big);
	memcpy(buf + hl + big, "\"}]}", 5);
	CHECK(w2j_decode_inplace(d, buf, len, 100, &c));
	CHECK_INT(c.ncolumns, 1);
	CHECK(c.ncolumns == 1 && c.columns[0].name_len == 3 &&
	      memcmp(c.columns[0].name, "a\nb", 3) == 0);
	CHECK(c.ncolumns == 1 && c.columns[0].value_len == big);
	printf("# decoder holds %zu bytes after a %zu-byte row\n", w2j_held_bytes(d), len);
	CHECK(w2j_held_bytes(d) < 256 * 1024);
out:
	free(buf);
	w2j_destroy(d);
}

/* An allocation that fails is told apart from input that is wrong. */
TEST(out_of_memory_told_apart)
{
	struct w2j_decoder *d = w2j_create();
	struct w2j_change c;
	struct w2j_field *f;
	size_t n;

	CHECK(d != NULL);
	if (!d)
		return;
	/* a length no arena can hold */
	CHECK(!w2j_decode(d, "{}", SIZE_MAX, &c));
	CHECK(w2j_out_of_memory(d));
	CHECK_STR(w2j_errmsg(d), "out of memory");
	CHECK(!w2j_decode(d, "{\"action\":", 10, &c));
	CHECK(!w2j_out_of_memory(d));
	CHECK(!w2j_decode_object(d, "{}", SIZE_MAX, &f, &n));
	CHECK(w2j_out_of_memory(d));
	CHECK(w2j_decode_object(d, "{}", 2, &f, &n));
	CHECK(!w2j_out_of_memory(d));
	w2j_destroy(d);
}

int main(void)
{
	RUN(create_destroy);
	RUN(fast_path_agrees_with_yajl);
	RUN(inplace_agrees_with_yajl);
	RUN(fixture_begin_insert_commit);
	RUN(fixture_messages);
	RUN(fixture_update_delete_truncate);
	RUN(fixture_minimal_options);
	RUN(fixture_extra_keys_ignored);
	RUN(fixture_escapes);
	RUN(escapes);
	RUN(nul_inside_value);
	RUN(unicode_raw);
	RUN(numerics_verbatim);
	RUN(null_and_bool_values);
	RUN(jsonb_value_escaped_once);
	RUN(huge_payload);
	RUN(unescape_copy_sized_to_its_string);
	RUN(out_of_memory_told_apart);
	RUN(malformed_inputs);
	RUN(error_messages);
	RUN(xid_range);
	RUN(lsn_values);
	RUN(unknown_keys_skipped);
	RUN(decoder_reuse);
	RUN(object_flat);
	RUN(object_deep_and_large);
	RUN(object_rejects_non_objects);
	RUN(decode_and_object_interleaved);
	RUN(input_from_own_output);
	RUN(decode_object_empty_content_from_arena);
	return test_done();
}
