/*
 * test_pgoutput.c - the pgoutput decoder (lib/pgoutput.c).
 *
 * The core is a differential test at decoder level on bytes captured from
 * PostgreSQL 15 (tests/fixtures/pgoutput/, made by capture.sql there): the
 * same WAL went through a pgoutput slot and a wal2json slot with the relay's
 * options, and every pgoutput message decoded here must give the change that
 * lib/wal2json.c gives for wal2json's line, field by field. Then hand-made
 * cases: every truncation of every captured message, unknown and
 * unsupported message types, changes for unknown relations or outside a
 * transaction, ALTER TABLE replacing a relation, type names, timestamps.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lsn.h"
#include "pgoutput.h"
#include "test.h"
#include "wal2json.h"

#ifndef FIXTURES_DIR
#error "FIXTURES_DIR must be defined (absolute path of tests/fixtures)"
#endif

/* The domain "posint" of capture.sql: its Type message names it by its base
 * type (int4), so the relay would read its name from pg_type; the test says it. */
#define POSINT_OID 16392

#define FIXTURE_SUBDIR "pgoutput"
#include "fixture.h"

/* One captured pgoutput message: "LSN HEX" (the row's lsn is the XLogData dataStart). */
struct msg {
	lsn_t lsn;
	unsigned char *data;
	size_t len;
};

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static bool parse_msg(const char *line, struct msg *m)
{
	const char *sp = strchr(line, ' ');
	size_t n;

	if (!sp || !lsn_parse(line, (size_t)(sp - line), &m->lsn))
		return false;
	sp++;
	n = strlen(sp);
	if (n % 2)
		return false;
	m->len = n / 2;
	m->data = malloc(m->len ? m->len : 1);
	if (!m->data)
		return false;
	for (size_t i = 0; i < m->len; i++) {
		int hi = hexval(sp[2 * i]), lo = hexval(sp[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		m->data[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

static size_t read_msgs(struct msg *msgs, size_t max)
{
	struct lines ls;
	size_t n = 0;

	if (!read_fixture("pgoutput.hex", &ls))
		return 0;
	for (size_t i = 0; i < ls.n && n < max; i++)
		if (parse_msg(ls.line[i], &msgs[n]))
			n++;
	free_fixture(&ls);
	return n;
}

static void free_msgs(struct msg *msgs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(msgs[i].data);
}

static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
	if (!a || !b)
		return a == b && alen == blen;
	return alen == blen && memcmp(a, b, alen) == 0;
}

#define SAME_STR(what, a, al, b, bl)                                                               \
	do {                                                                                           \
		if (!same(a, al, b, bl)) {                                                                 \
			printf("# %s: %s: pgoutput \"%.*s\", wal2json \"%.*s\"\n", where, what,                \
			       a ? (int)(al) : 6, a ? a : "(null)", b ? (int)(bl) : 6, b ? b : "(null)");      \
			ok = false;                                                                            \
		}                                                                                          \
	} while (0)

/* Field by field; B's nextlsn is the one thing pgoutput's Begin cannot carry. */
static bool same_change(const char *where, const struct w2j_change *p, const struct w2j_change *w)
{
	bool ok = true;

	if (p->action != w->action || p->has_xid != w->has_xid || p->xid != w->xid ||
	    p->lsn != w->lsn || p->transactional != w->transactional || p->ncolumns != w->ncolumns) {
		printf("# %s: action %c/%c xid %d:%u/%d:%u lsn %llx/%llx transactional %d/%d "
		       "columns %zu/%zu\n",
		       where, p->action, w->action, p->has_xid, p->xid, w->has_xid, w->xid,
		       (unsigned long long)p->lsn, (unsigned long long)w->lsn, p->transactional,
		       w->transactional, p->ncolumns, w->ncolumns);
		return false;
	}
	if (p->action == W2J_BEGIN ? p->nextlsn != LSN_INVALID : p->nextlsn != w->nextlsn) {
		printf("# %s: nextlsn %llx/%llx\n", where, (unsigned long long)p->nextlsn,
		       (unsigned long long)w->nextlsn);
		ok = false;
	}
	SAME_STR("timestamp", p->timestamp, p->timestamp_len, w->timestamp, w->timestamp_len);
	SAME_STR("schema", p->schema, p->schema_len, w->schema, w->schema_len);
	SAME_STR("table", p->table, p->table_len, w->table, w->table_len);
	SAME_STR("prefix", p->prefix, p->prefix_len, w->prefix, w->prefix_len);
	SAME_STR("content", p->content, p->content_len, w->content, w->content_len);
	for (size_t i = 0; i < p->ncolumns && ok; i++) {
		const struct w2j_field *a = &p->columns[i], *b = &w->columns[i];

		SAME_STR("column name", a->name, a->name_len, b->name, b->name_len);
		SAME_STR("column type", a->type, a->type_len, b->type, b->type_len);
		SAME_STR("column value", a->value, a->value_len, b->value, b->value_len);
		if (a->kind != b->kind) {
			printf("# %s: column %.*s: kind %d/%d\n", where, (int)a->name_len, a->name, a->kind,
			       b->kind);
			ok = false;
		}
		/* Both strings are NUL-terminated too. */
		if (a->value && a->value[a->value_len] != '\0')
			ok = false;
	}
	return ok;
}

/*
 * wal2json's lines without the B/C pairs of transactions with nothing
 * published in them (DDL, other tables): PostgreSQL 15's pgoutput sends no
 * Begin/Commit for those.
 */
static size_t wal2json_lines(struct w2j_decoder *w, struct lines *ls, bool *keep)
{
	char acts[MAX_LINES];
	size_t n = 0;
	struct w2j_change c;

	for (size_t i = 0; i < ls->n; i++) {
		acts[i] = w2j_decode(w, ls->line[i], ls->len[i], &c) ? (char)c.action : '?';
		keep[i] = true;
	}
	for (size_t i = 0; i + 1 < ls->n; i++)
		if (acts[i] == 'B' && acts[i + 1] == 'C')
			keep[i] = keep[i + 1] = false;
	for (size_t i = 0; i < ls->n; i++)
		n += keep[i];
	return n;
}

TEST(differential_against_wal2json)
{
	static struct msg msgs[MAX_LINES];
	size_t nmsg = read_msgs(msgs, MAX_LINES), compared = 0, j = 0;
	struct lines ls;
	bool keep[MAX_LINES];
	struct pgo_decoder *p = pgo_create();
	struct w2j_decoder *w = w2j_create();
	size_t nw, actions[128] = {0};
	size_t types_seen = 0;

	CHECK(nmsg > 40);
	CHECK(read_fixture("wal2json.jsonl", &ls));
	CHECK(p && w);
	if (!p || !w || nmsg == 0 || !ls.text)
		goto out;
	CHECK(pgo_set_type_name(p, POSINT_OID, "posint"));
	nw = wal2json_lines(w, &ls, keep);
	for (size_t i = 0; i < nmsg; i++) {
		struct w2j_change pc, wc;
		bool has, more = true;
		char where[64];

		if (!pgo_decode(p, (const char *)msgs[i].data, msgs[i].len, msgs[i].lsn, &pc, &has)) {
			printf("# message %zu: %s\n", i + 1, pgo_errmsg(p));
			CHECK(0);
			continue;
		}
		for (; has && more; more = pgo_next(p, &pc)) {
			while (j < ls.n && !keep[j])
				j++;
			if (j >= ls.n) {
				printf("# message %zu: no wal2json line left\n", i + 1);
				CHECK(0);
				break;
			}
			snprintf(where, sizeof(where), "message %zu / line %zu", i + 1, j + 1);
			CHECK(w2j_decode(w, ls.line[j], ls.len[j], &wc));
			CHECK(same_change(where, &pc, &wc));
			actions[pc.action & 127]++;
			for (size_t k = 0; k < pc.ncolumns; k++)
				types_seen += pc.columns[k].type != NULL;
			compared++;
			j++;
		}
	}
	/* Every wal2json change was matched, and the capture covers what it should. */
	CHECK_INT(compared, nw);
	CHECK(actions['B'] >= 10 && actions['C'] == actions['B']);
	CHECK(actions['I'] >= 6);
	CHECK(actions['U'] >= 3);
	CHECK(actions['D'] >= 2);
	CHECK_INT(actions['T'], 2);
	CHECK_INT(actions['M'], 4);
	CHECK(types_seen > 100);
out:
	free_fixture(&ls);
	free_msgs(msgs, nmsg);
	pgo_destroy(p);
	w2j_destroy(w);
}

/* Without the name the relay reads from pg_type, the domain is typed by its base type. */
TEST(domain_named_by_base_type_without_hook)
{
	static struct msg msgs[MAX_LINES];
	size_t nmsg = read_msgs(msgs, MAX_LINES);
	struct pgo_decoder *p = pgo_create();
	bool found = false;

	for (size_t i = 0; p && i < nmsg; i++) {
		struct w2j_change c;
		bool has;

		CHECK(pgo_decode(p, (const char *)msgs[i].data, msgs[i].len, msgs[i].lsn, &c, &has));
		for (size_t k = 0; has && k < c.ncolumns; k++) {
			if (strcmp(c.columns[k].name, "dom") == 0) {
				CHECK_STR(c.columns[k].type, "int4");
				found = true;
			} else if (strcmp(c.columns[k].name, "mo") == 0) {
				CHECK_STR(c.columns[k].type, "mood");
			} else if (strcmp(c.columns[k].name, "moa") == 0) {
				CHECK_STR(c.columns[k].type, "mood[]");
			}
		}
	}
	CHECK(found);
	CHECK_STR(pgo_type_name(p, POSINT_OID, -1), "int4");
	CHECK(pgo_set_type_name(p, POSINT_OID, "posint"));
	CHECK_STR(pgo_type_name(p, POSINT_OID, -1), "posint");
	free_msgs(msgs, nmsg);
	pgo_destroy(p);
}

/*
 * Every strict prefix of every captured message is refused with a message,
 * from an exactly sized copy (ASan sees any read past it); the whole message
 * then goes in, so the decoder's state follows the capture.
 */
TEST(truncated_at_every_length)
{
	static struct msg msgs[MAX_LINES];
	size_t nmsg = read_msgs(msgs, MAX_LINES), refused = 0, tried = 0;
	struct pgo_decoder *p = pgo_create();

	CHECK(pgo_set_type_name(p, POSINT_OID, "posint"));
	for (size_t i = 0; i < nmsg; i++) {
		struct w2j_change c;
		bool has;

		for (size_t cut = 0; cut < msgs[i].len; cut++) {
			char *copy = malloc(cut ? cut : 1);

			memcpy(copy, msgs[i].data, cut);
			tried++;
			if (!pgo_decode(p, copy, cut, msgs[i].lsn, &c, &has) && !has &&
			    pgo_errmsg(p)[0] != '\0')
				refused++;
			else
				printf("# message %zu cut at %zu was accepted\n", i + 1, cut);
			free(copy);
		}
		CHECK(pgo_decode(p, (const char *)msgs[i].data, msgs[i].len, msgs[i].lsn, &c, &has));
	}
	CHECK(tried > 1000);
	CHECK_INT(refused, tried);
	free_msgs(msgs, nmsg);
	pgo_destroy(p);
}

/* A message built by hand: bytes appended big-endian. */
struct b {
	unsigned char d[512];
	size_t n;
};

static void u8(struct b *b, unsigned v)
{
	b->d[b->n++] = (unsigned char)v;
}
static void u16(struct b *b, unsigned v)
{
	u8(b, v >> 8);
	u8(b, v);
}
static void u32(struct b *b, uint32_t v)
{
	u16(b, v >> 16);
	u16(b, v & 0xffff);
}
static void u64(struct b *b, uint64_t v)
{
	u32(b, (uint32_t)(v >> 32));
	u32(b, (uint32_t)v);
}
static void str(struct b *b, const char *s)
{
	memcpy(b->d + b->n, s, strlen(s) + 1);
	b->n += strlen(s) + 1;
}
static void text(struct b *b, const char *s)
{
	u8(b, 't');
	u32(b, (uint32_t)strlen(s));
	memcpy(b->d + b->n, s, strlen(s));
	b->n += strlen(s);
}

static bool feed(struct pgo_decoder *p, const struct b *b, struct w2j_change *c, bool *has)
{
	return pgo_decode(p, (const char *)b->d, b->n, 0x1000, c, has);
}

static void begin(struct pgo_decoder *p, int64_t ts)
{
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has;

	u8(&b, 'B');
	u64(&b, 0x2000);
	u64(&b, (uint64_t)ts);
	u32(&b, 77);
	CHECK(feed(p, &b, &c, &has) && has && c.action == W2J_BEGIN && c.xid == 77);
}

/* Relation 5 "s"."t": (a integer) or, after ALTER TABLE, (a integer, b varchar(10)). */
static void relation(struct pgo_decoder *p, bool altered)
{
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has = true;

	u8(&b, 'R');
	u32(&b, 5);
	str(&b, "s");
	str(&b, "t");
	u8(&b, 'd');
	u16(&b, altered ? 2 : 1);
	u8(&b, 1);
	str(&b, "a");
	u32(&b, 23);
	u32(&b, 0xffffffff);
	if (altered) {
		u8(&b, 0);
		str(&b, "b");
		u32(&b, 1043);
		u32(&b, 14);
	}
	CHECK(feed(p, &b, &c, &has) && !has);
}

/* Protocol 2 streaming: stream messages parsed; a block's messages made protocol 1 again. */
TEST(streaming_messages)
{
	struct pgo_decoder *p = pgo_create();
	struct pgo_stream_msg sm;
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has;
	char err[128];
	char msg[64], bg[PGO_BEGIN_LEN], cm[PGO_COMMIT_LEN];
	uint32_t xid = 1;
	size_t skip = 9;

	u8(&b, 'S');
	u32(&b, 900);
	u8(&b, 1);
	CHECK(pgo_stream_parse((const char *)b.d, b.n, &sm, err, sizeof(err)));
	CHECK(sm.kind == PGO_STREAM_START && sm.xid == 900 && sm.first);
	CHECK(!pgo_stream_parse((const char *)b.d, b.n - 1, &sm, err, sizeof(err)));
	CHECK(strstr(err, "'S'") != NULL);
	b.n = 0;
	u8(&b, 'E');
	CHECK(pgo_stream_parse((const char *)b.d, b.n, &sm, err, sizeof(err)) &&
	      sm.kind == PGO_STREAM_STOP);
	b.n = 0;
	u8(&b, 'A');
	u32(&b, 900);
	u32(&b, 905);
	CHECK(pgo_stream_parse((const char *)b.d, b.n, &sm, err, sizeof(err)));
	CHECK(sm.kind == PGO_STREAM_ABORT && sm.xid == 900 && sm.subxid == 905);
	u8(&b, 0); /* a trailing byte: not the Stream Abort asked for */
	CHECK(!pgo_stream_parse((const char *)b.d, b.n, &sm, err, sizeof(err)));
	b.n = 0;
	u8(&b, 'I');
	u32(&b, 5);
	CHECK(pgo_stream_parse((const char *)b.d, b.n, &sm, err, sizeof(err)) &&
	      sm.kind == PGO_NOT_STREAM);
	CHECK(pgo_stream_parse("", 0, &sm, err, sizeof(err)) && sm.kind == PGO_NOT_STREAM);
	b.n = 0;
	u8(&b, 'c');
	u32(&b, 900);
	u8(&b, 0);
	u64(&b, 0x3000);
	u64(&b, 0x3038);
	u64(&b, 0); /* 2000-01-01 00:00:00 UTC */
	CHECK(pgo_stream_parse((const char *)b.d, b.n, &sm, err, sizeof(err)));
	CHECK(sm.kind == PGO_STREAM_COMMIT && sm.xid == 900);
	CHECK(sm.commit_lsn == 0x3000 && sm.end_lsn == 0x3038 && sm.commit_time == 0);

	/* The transaction as protocol 1 sends it: Begin, its Relation and Insert, Commit. */
	pgo_stream_begin(&sm, bg);
	CHECK(pgo_decode(p, bg, sizeof(bg), 0x3000, &c, &has) && has);
	CHECK(c.action == W2J_BEGIN && c.xid == 900 && c.lsn == 0x3000);
	b.n = 0;
	u8(&b, 'R');
	u32(&b, 905); /* the subtransaction's xid */
	u32(&b, 5);
	str(&b, "s");
	str(&b, "t");
	u8(&b, 'd');
	u16(&b, 1);
	u8(&b, 1);
	str(&b, "a");
	u32(&b, 23);
	u32(&b, 0xffffffff);
	memcpy(msg, b.d, b.n);
	CHECK(pgo_stream_unwrap(msg, b.n, &xid, &skip) && xid == 905 && skip == 4);
	CHECK(pgo_decode(p, msg + skip, b.n - skip, 0x2000, &c, &has) && !has);
	b.n = 0;
	u8(&b, 'I');
	u32(&b, 900);
	u32(&b, 5);
	u8(&b, 'N');
	u16(&b, 1);
	text(&b, "42");
	memcpy(msg, b.d, b.n);
	CHECK(pgo_stream_unwrap(msg, b.n, &xid, &skip) && xid == 900 && skip == 4);
	CHECK(pgo_decode(p, msg + skip, b.n - skip, 0x2100, &c, &has) && has);
	CHECK(c.action == W2J_INSERT && c.ncolumns == 1 && c.lsn == 0x2100);
	CHECK_STR(c.columns[0].value, "42");
	pgo_stream_commit(&sm, cm);
	CHECK(pgo_decode(p, cm, sizeof(cm), 0x3038, &c, &has) && has);
	CHECK(c.action == W2J_COMMIT && c.lsn == 0x3000 && c.nextlsn == 0x3038);
	CHECK_STR(c.timestamp, "2000-01-01 00:00:00+00");
	/* Origin carries no xid; a message too short to hold one is refused. */
	memcpy(msg, "O", 1);
	CHECK(pgo_stream_unwrap(msg, 1, &xid, &skip) && xid == 0 && skip == 0);
	memcpy(msg, "I\0\0\0", 4);
	CHECK(!pgo_stream_unwrap(msg, 4, &xid, &skip));
	/* pgo_decode itself still takes no stream message. */
	b.n = 0;
	u8(&b, 'E');
	CHECK(!feed(p, &b, &c, &has) && strstr(pgo_errmsg(p), "streaming") != NULL);
	pgo_destroy(p);
}

TEST(alter_table_replaces_relation)
{
	struct pgo_decoder *p = pgo_create();
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has;

	begin(p, 0);
	relation(p, false);
	u8(&b, 'I');
	u32(&b, 5);
	u8(&b, 'N');
	u16(&b, 1);
	text(&b, "42");
	CHECK(feed(p, &b, &c, &has) && has);
	CHECK_INT(c.ncolumns, 1);
	CHECK_STR(c.schema, "s");
	CHECK_STR(c.table, "t");
	CHECK_STR(c.columns[0].type, "integer");
	CHECK_INT(c.columns[0].kind, W2J_KIND_NUMBER);
	CHECK_INT(c.lsn, 0x1000);
	/* The old shape no longer fits once the relation changed. */
	relation(p, true);
	CHECK(!feed(p, &b, &c, &has) && !has);
	CHECK(strstr(pgo_errmsg(p), "2") != NULL);
	b.n = 0;
	u8(&b, 'I');
	u32(&b, 5);
	u8(&b, 'N');
	u16(&b, 2);
	text(&b, "43");
	text(&b, "x\"y");
	CHECK(feed(p, &b, &c, &has) && has);
	CHECK_INT(c.ncolumns, 2);
	CHECK_STR(c.columns[1].name, "b");
	CHECK_STR(c.columns[1].type, "character varying(10)");
	CHECK_STR(c.columns[1].value, "x\"y");
	CHECK_INT(c.columns[1].kind, W2J_KIND_STRING);
	pgo_destroy(p);
}

TEST(unknown_relation_and_outside_transaction)
{
	struct pgo_decoder *p = pgo_create();
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has;

	u8(&b, 'I');
	u32(&b, 999);
	u8(&b, 'N');
	u16(&b, 1);
	text(&b, "1");
	CHECK(!feed(p, &b, &c, &has) && !has);
	CHECK(strstr(pgo_errmsg(p), "outside a transaction") != NULL);
	begin(p, 0);
	CHECK(!feed(p, &b, &c, &has) && !has);
	CHECK(strstr(pgo_errmsg(p), "999") != NULL);
	CHECK(strstr(pgo_errmsg(p), "no Relation") != NULL);
	/* Truncate of a known and an unknown relation: refused whole. */
	relation(p, false);
	b.n = 0;
	u8(&b, 'T');
	u32(&b, 2);
	u8(&b, 0);
	u32(&b, 5);
	u32(&b, 999);
	CHECK(!feed(p, &b, &c, &has) && !has);
	CHECK(!pgo_next(p, &c));
	/* Commit ends the transaction: a second one has no Begin. */
	b.n = 0;
	u8(&b, 'C');
	u8(&b, 0);
	u64(&b, 0x2000);
	u64(&b, 0x2030);
	u64(&b, 0);
	CHECK(feed(p, &b, &c, &has) && has);
	CHECK_INT(c.nextlsn, 0x2030);
	CHECK_INT(c.xid, 77);
	CHECK(!feed(p, &b, &c, &has) && !has);
	pgo_destroy(p);
}

TEST(unknown_and_unsupported_messages)
{
	struct pgo_decoder *p = pgo_create();
	struct w2j_change c;
	bool has;

	CHECK(!pgo_decode(p, "Z", 1, 0, &c, &has));
	CHECK(strstr(pgo_errmsg(p), "unknown") != NULL);
	CHECK(!pgo_decode(p, "\x01\x02", 2, 0, &c, &has));
	CHECK(strstr(pgo_errmsg(p), "0x01") != NULL);
	CHECK(!pgo_decode(p, "", 0, 0, &c, &has));
	CHECK(strstr(pgo_errmsg(p), "empty") != NULL);
	CHECK(!pgo_decode(p, "S\0\0\0\1\1", 6, 0, &c, &has));
	CHECK(strstr(pgo_errmsg(p), "streaming") != NULL);
	CHECK(!pgo_decode(p, "b", 1, 0, &c, &has));
	CHECK(strstr(pgo_errmsg(p), "two-phase") != NULL);
	/* Origin: accepted, no change. */
	CHECK(pgo_decode(p, "O\0\0\0\0\0\0\0\1origin", 16, 0, &c, &has) && !has);
	CHECK(!pgo_decode(p, "O\0\0\0\0\0\0\0\1origin", 15, 0, &c, &has));
	pgo_destroy(p);
}

TEST(tuple_kinds)
{
	struct pgo_decoder *p = pgo_create();
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has;

	begin(p, 0);
	relation(p, true);
	/* Update: old key skipped; unchanged TOAST left out, as wal2json leaves it out. */
	u8(&b, 'U');
	u32(&b, 5);
	u8(&b, 'K');
	u16(&b, 2);
	text(&b, "1");
	u8(&b, 'n');
	u8(&b, 'N');
	u16(&b, 2);
	text(&b, "2");
	u8(&b, 'u');
	CHECK(feed(p, &b, &c, &has) && has && c.action == W2J_UPDATE);
	CHECK_INT(c.ncolumns, 1);
	CHECK_STR(c.columns[0].value, "2");
	/* Delete: no columns. */
	b.n = 0;
	u8(&b, 'D');
	u32(&b, 5);
	u8(&b, 'O');
	u16(&b, 2);
	text(&b, "1");
	u8(&b, 'n');
	CHECK(feed(p, &b, &c, &has) && has && c.action == W2J_DELETE);
	CHECK_INT(c.ncolumns, 0);
	/* Binary values and unknown kinds are refused. */
	b.n = 0;
	u8(&b, 'I');
	u32(&b, 5);
	u8(&b, 'N');
	u16(&b, 2);
	text(&b, "1");
	u8(&b, 'b');
	u32(&b, 0);
	CHECK(!feed(p, &b, &c, &has));
	CHECK(strstr(pgo_errmsg(p), "binary") != NULL);
	b.d[b.n - 5] = 'x';
	CHECK(!feed(p, &b, &c, &has));
	/* A number column with text that is not one: wal2json errors as well. */
	b.n = 0;
	u8(&b, 'I');
	u32(&b, 5);
	u8(&b, 'N');
	u16(&b, 2);
	text(&b, "12a");
	u8(&b, 'n');
	CHECK(!feed(p, &b, &c, &has));
	CHECK(strstr(pgo_errmsg(p), "not a number") != NULL);
	/* Trailing bytes after the tuple. */
	b.n = 0;
	u8(&b, 'I');
	u32(&b, 5);
	u8(&b, 'N');
	u16(&b, 2);
	u8(&b, 'n');
	u8(&b, 'n');
	u8(&b, 0);
	CHECK(!feed(p, &b, &c, &has));
	pgo_destroy(p);
}

/* An Insert into relation 6 (v text, b bytea) of a text value of vlen bytes
 * and a bytea value "\\x" + blen hex digits, in a malloc'd message. */
static char *big_insert(size_t vlen, size_t blen, size_t *n)
{
	char *m = malloc(vlen + blen + 64), *q = m;

	*q++ = 'I';
	memcpy(q, "\0\0\0\6N\0\2t", 8);
	q += 8;
	for (int sh = 24; sh >= 0; sh -= 8)
		*q++ = (char)(vlen >> sh);
	memset(q, 'v', vlen);
	q += vlen;
	*q++ = 't';
	for (int sh = 24; sh >= 0; sh -= 8)
		*q++ = (char)((blen + 2) >> sh);
	*q++ = '\\';
	*q++ = 'x';
	memset(q, 'a', blen);
	q += blen;
	*n = (size_t)(q - m);
	return m;
}

/* Large string values point into the message (pgoutput.h, Ownership); smaller ones, numbers and
 * every value of a different length are copied, NUL-terminated; the arena is sized for exactly
 * the copied ones (ASan would see an overflow at the bytea edge, whose "\\x" is cut). A bytea
 * whose text is 64 KiB or 64 KiB + 1 with its "\\x" is shorter than 64 KiB without it: copied
 * and NUL-terminated (it used to point into the message, unterminated). */
TEST(large_values_by_reference)
{
	static const size_t sizes[][2] = {{PGO_BY_REFERENCE, 10},     {PGO_BY_REFERENCE - 1, 10},
	                                  {10, PGO_BY_REFERENCE - 2}, {10, PGO_BY_REFERENCE - 1},
	                                  {10, PGO_BY_REFERENCE},     {300000, 200000}};
	struct pgo_decoder *p = pgo_create();
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has = true;

	begin(p, 0);
	u8(&b, 'R');
	u32(&b, 6);
	str(&b, "s");
	str(&b, "big");
	u8(&b, 'd');
	u16(&b, 2);
	u8(&b, 0);
	str(&b, "v");
	u32(&b, 25);
	u32(&b, 0xffffffff);
	u8(&b, 0);
	str(&b, "b");
	u32(&b, 17);
	u32(&b, 0xffffffff);
	CHECK(feed(p, &b, &c, &has) && !has);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t vlen = sizes[k][0], blen = sizes[k][1], n;
		char *m = big_insert(vlen, blen, &n);

		CHECK(pgo_decode(p, m, n, 0x2000, &c, &has) && has && c.ncolumns == 2);
		for (int i = 0; i < 2; i++) {
			const struct w2j_field *f = &c.columns[i];
			size_t want = i ? blen : vlen;
			bool inside = f->value >= m && f->value < m + n;

			CHECK_INT(f->value_len, want);
			CHECK(f->kind == W2J_KIND_STRING);
			for (size_t j = 0; j < want; j++)
				if (f->value[j] != (i ? 'a' : 'v')) {
					CHECK(!"the value's bytes");
					break;
				}
			/* By reference exactly when the value (a bytea's without "\\x") is 64 KiB
			 * or more; every shorter one is NUL-terminated. */
			CHECK(inside == (want >= PGO_BY_REFERENCE));
			if (want < PGO_BY_REFERENCE)
				CHECK(f->value[want] == '\0');
		}
		free(m);
	}
	pgo_destroy(p);
}

TEST(message_content_ends_at_nul)
{
	struct pgo_decoder *p = pgo_create();
	struct w2j_change c;
	bool has;
	static const char m[] = "M\0\0\0\0\0\0\0\0\x10pfx\0\0\0\0\4a\0b\xff";

	CHECK(pgo_decode(p, m, sizeof(m) - 1, 0, &c, &has) && has);
	CHECK(c.action == W2J_MESSAGE && !c.transactional && !c.has_xid && !c.timestamp);
	CHECK_INT(c.lsn, 0x10);
	CHECK_STR(c.prefix, "pfx");
	CHECK_INT(c.content_len, 1);
	CHECK_STR(c.content, "a");
	/* Transactional without a Begin. */
	CHECK(!pgo_decode(p, "\x4d\x01\0\0\0\0\0\0\0\x10pfx\0\0\0\0\0", 18, 0, &c, &has));
	pgo_destroy(p);
}

TEST(commit_timestamps)
{
	static const struct {
		int64_t ts;
		const char *want;
	} cases[] = {
	    /* from PostgreSQL 15, TimeZone UTC, DateStyle ISO */
	    {0, "2000-01-01 00:00:00+00"},
	    {-1, "1999-12-31 23:59:59.999999+00"},
	    {-64464465599500000LL, "0044-03-15 12:00:00.5+00 BC"},
	    {-63082281600000000LL, "0001-01-01 00:00:00+00"},
	    {-63082281601000000LL, "0001-12-31 23:59:59+00 BC"},
	    {762525296780000LL, "2024-02-29 12:34:56.78+00"},
	    {-211813488000000000LL, "4714-11-24 00:00:00+00 BC"},
	    {326470291750010000LL, "12345-06-07 08:09:10.01+00"},
	    {9223371331199999999LL, "294276-12-31 23:59:59.999999+00"},
	    {INT64_MAX, "infinity"},
	    {INT64_MIN, "-infinity"},
	    {INT64_MIN + 1, "(timestamp out of range)"},
	};
	struct pgo_decoder *p = pgo_create();
	struct b b = {.n = 0};
	struct w2j_change c;
	bool has;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		b.n = 0;
		u8(&b, 'B');
		u64(&b, 1);
		u64(&b, (uint64_t)cases[i].ts);
		u32(&b, 1);
		CHECK(feed(p, &b, &c, &has) && has);
		CHECK_STR(c.timestamp, cases[i].want);
		CHECK_INT(c.timestamp_len, strlen(cases[i].want));
	}
	pgo_destroy(p);
}

/*
 * tests/fixtures/pgoutput/types.txt: "oid typmod format_type(oid, typmod)"
 * from PostgreSQL 15 for every built-in type and array and a spread of
 * typmods; wal2json drops the quotes of a quoted name that is not an array.
 */
TEST(builtin_type_names)
{
	struct lines ls;
	struct pgo_decoder *p = pgo_create();
	size_t n = 0;

	CHECK(read_fixture("types.txt", &ls));
	for (size_t i = 0; i < ls.n; i++) {
		char *line = ls.line[i], *end, want[128];
		unsigned long oid = strtoul(line, &end, 10);
		long typmod = strtol(end, &end, 10);
		size_t wl;
		const char *got;

		snprintf(want, sizeof(want), "%s", end + 1);
		wl = strlen(want);
		if (wl >= 2 && want[0] == '"' && want[wl - 1] == '"') {
			memmove(want, want + 1, wl - 2);
			want[wl - 2] = '\0';
		}
		got = pgo_type_name(p, (uint32_t)oid, (int32_t)typmod);
		if (!got || strcmp(got, want) != 0) {
			printf("# oid %lu typmod %ld: \"%s\", want \"%s\"\n", oid, typmod, got ? got : "(null)",
			       want);
			CHECK(0);
		}
		n++;
	}
	CHECK(n > 150);
	CHECK(pgo_type_name(p, 99999, -1) == NULL);
	free_fixture(&ls);
	pgo_destroy(p);
}

TEST(type_messages)
{
	struct pgo_decoder *p = pgo_create();
	struct w2j_change c;
	bool has;

	CHECK(pgo_decode(p, "Y\0\0\x40\1public\0MyType\0", 19, 0, &c, &has) && !has);
	CHECK_STR(pgo_type_name(p, 0x4001, -1), "MyType");
	CHECK(pgo_decode(p, "Y\0\0\x40\2public\0_MyType\0", 20, 0, &c, &has));
	CHECK_STR(pgo_type_name(p, 0x4002, -1), "\"MyType\"[]");
	CHECK(pgo_decode(p, "Y\0\0\x40\3sch\0_t\0", 12, 0, &c, &has));
	CHECK_STR(pgo_type_name(p, 0x4003, -1), "sch.t[]");
	CHECK(!pgo_decode(p, "Y\0\0\x40\3sch\0_t", 11, 0, &c, &has));
	CHECK(!pgo_decode(p, "Y\0\0\x40\3sch\0_t\0x", 13, 0, &c, &has));
	/* The caller's name wins over the Type message and the built-in table. */
	CHECK(pgo_set_type_name(p, 0x4003, "sch.dom"));
	CHECK_STR(pgo_type_name(p, 0x4003, -1), "sch.dom");
	CHECK(pgo_set_type_name(p, 23, "int4alias"));
	CHECK_STR(pgo_type_name(p, 23, -1), "int4alias");
	pgo_destroy(p);
}

int main(void)
{
	RUN(differential_against_wal2json);
	RUN(domain_named_by_base_type_without_hook);
	RUN(truncated_at_every_length);
	RUN(alter_table_replaces_relation);
	RUN(streaming_messages);
	RUN(unknown_relation_and_outside_transaction);
	RUN(unknown_and_unsupported_messages);
	RUN(tuple_kinds);
	RUN(message_content_ends_at_nul);
	RUN(commit_timestamps);
	RUN(builtin_type_names);
	RUN(type_messages);
	RUN(large_values_by_reference);
	return test_done();
}
