/*
 * fuzz_pgoutput.c - libFuzzer target for the pgoutput decoder and the event
 * mapper behind it: whatever bytes the walsender sends, the relay must decode
 * them or reject them with a message, and map the rows it decodes, without
 * crashing, leaking or reading out of bounds.
 *
 * The decoder has state (the transaction, the relation and type caches), so
 * one input is a sequence of messages, each a 2-byte big-endian length and
 * that many bytes (a short tail is one last message): the seeds in
 * tests/fuzz/corpus-pgoutput are captured transactions framed that way
 * (Begin, Type, Relation, Insert..., Commit). A fresh decoder per input keeps
 * every finding reproducible from its input alone.
 *
 * Built and run by tests/fuzz/run.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "pgoutput.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct mapper *map;
static struct relay_config cf;

static void setup(void)
{
	char err[256];

	cf.stream = "outbox:{aggregate_type}";
	cf.dead_letter_stream = "outbox:dead-letter";
	cf.id_column = "id";
	cf.id_format = "any";
	cf.slot = "fuzz";
	map = mapper_create(&cf, err, sizeof(err));
	if (!map)
		abort();
}

/* A string the change hands out: s[0..n) readable and NUL-terminated. */
static void touch(const char *s, size_t n)
{
	if (!s) {
		if (n)
			abort();
		return;
	}
	if (s[n] != '\0' || memchr(s, 0x01, n) == (void *)1)
		abort();
}

static void check_change(const struct w2j_change *c, const char *raw, size_t rawlen)
{
	struct txn_info tx = {.commit_lsn = 0x1000, .has_xid = c->has_xid, .xid = c->xid};
	struct event ev;
	const char *reason;

	touch(c->timestamp, c->timestamp_len);
	touch(c->schema, c->schema_len);
	touch(c->table, c->table_len);
	touch(c->prefix, c->prefix_len);
	touch(c->content, c->content_len);
	for (size_t i = 0; i < c->ncolumns; i++) {
		const struct w2j_field *f = &c->columns[i];

		touch(f->name, f->name_len);
		touch(f->type, f->type_len);
		touch(f->value, f->value_len);
		if ((f->kind == W2J_KIND_NULL) != (f->value == NULL))
			abort();
	}
	if (c->ncolumns > 0)
		(void)mapper_map(map, &tx, 0, c->columns, c->ncolumns, raw, rawlen, &ev, &reason);
}

/*
 * A streamed transaction's message as the relay takes it (relay_wal.c): a stream
 * message parsed (a Stream Commit gives the Begin and Commit protocol 1 would
 * have sent, decoded here), any other unwrapped. False: nothing left to decode.
 */
static bool stream_step(struct pgo_decoder *d, char *msg, size_t *len, size_t *skip)
{
	struct pgo_stream_msg sm;
	char err[200], bg[PGO_BEGIN_LEN], cm[PGO_COMMIT_LEN];
	struct w2j_change c;
	bool has = false;
	uint32_t xid;

	if (!pgo_stream_parse(msg, *len, &sm, err, sizeof(err))) {
		if (!err[0])
			abort(); /* a rejection says why */
		return false;
	}
	if (sm.kind == PGO_STREAM_COMMIT) {
		pgo_stream_begin(&sm, bg);
		pgo_stream_commit(&sm, cm);
		if (pgo_decode(d, bg, sizeof(bg), sm.commit_lsn, &c, &has) != has)
			abort();
		if (has)
			check_change(&c, bg, sizeof(bg));
		if (pgo_decode(d, cm, sizeof(cm), sm.end_lsn, &c, &has) && has)
			check_change(&c, cm, sizeof(cm));
		return false;
	}
	if (sm.kind != PGO_NOT_STREAM)
		return false;
	if (!pgo_stream_unwrap(msg, *len, &xid, skip))
		return false;
	*len -= *skip;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pgo_decoder *d;
	size_t pos = 0;
	bool streamed;

	if (!map)
		setup();
	d = pgo_create();
	if (!d)
		abort();
	/* Bit 1 of the first byte: the messages are a streamed transaction's (protocol 2). */
	streamed = size > 0 && (data[0] & 2);
	/* Names the caller registers must not upset anything either. */
	if (size > 0 && (data[0] & 1) && !pgo_set_type_name(d, 16392, "posint"))
		abort();
	while (pos < size) {
		size_t len = size - pos;
		char *msg;
		struct w2j_change c;
		bool has = false;
		size_t skip = 0;

		if (len >= 2) {
			size_t want = (size_t)data[pos] << 8 | data[pos + 1];

			pos += 2;
			len = want < size - pos ? want : size - pos;
		}
		/* An exactly sized copy, so that ASan sees any read past the message. */
		msg = malloc(len ? len : 1);
		if (!msg)
			abort();
		memcpy(msg, data + pos, len);
		pos += len;
		if (streamed && !stream_step(d, msg, &len, &skip)) {
			free(msg);
			continue;
		}
		if (pgo_decode(d, msg + skip, len, 0x1000 + pos, &c, &has)) {
			for (bool more = has; more; more = pgo_next(d, &c))
				check_change(&c, msg + skip, len);
		} else if (has || pgo_errmsg(d)[0] == '\0') {
			abort(); /* a rejection gives no change and says why */
		}
		(void)pgo_type_name(d, (uint32_t)len, (int32_t)(len * 65537));
		free(msg);
	}
	pgo_destroy(d);
	return 0;
}
