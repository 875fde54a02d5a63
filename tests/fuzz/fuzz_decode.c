/*
 * fuzz_decode.c - libFuzzer target for the wal2json decoder and the event
 * mapper: whatever bytes arrive as an XLogData payload, the relay must decode
 * them or reject them with a message, and map what it decodes (or
 * dead-letter it), without crashing, leaking or reading out of bounds.
 * Differential: a second decoder with the fast path off (yajl for
 * everything) must reach the same verdict, the same message on failure and
 * the same change on success.
 *
 * Built and run by tests/fuzz/run.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "wal2json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct w2j_decoder *dec;
static struct w2j_decoder *ref; /* yajl only */
static struct w2j_decoder *inp; /* w2j_decode_inplace() from 4-byte strings on */
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
	dec = w2j_create();
	ref = w2j_create();
	inp = w2j_create();
	map = mapper_create(&cf, err, sizeof(err));
	if (!dec || !ref || !inp || !map)
		abort();
	w2j_set_inplace_min(inp, 4);
	w2j_set_fast_path(ref, false);
}

static bool same_text(const char *a, size_t alen, const char *b, size_t blen)
{
	if (!a || !b)
		return a == b && alen == blen;
	return alen == blen && memcmp(a, b, alen) == 0;
}

/* Both decoders accepted, or both rejected with the same message (abort() otherwise). */
static bool same_verdict(bool ok, bool ref_ok)
{
	if (ok != ref_ok || (!ok && strcmp(w2j_errmsg(dec), w2j_errmsg(ref)) != 0))
		abort();
	return ok;
}

/* The fast path and yajl must agree on buf: abort() where they do not. */
static void compare_paths(const char *buf, size_t size, bool ok, const struct w2j_change *a)
{
	struct w2j_change b;

	if (!same_verdict(ok, w2j_decode(ref, buf, size, &b)))
		return;
	if (a->action != b.action || a->has_xid != b.has_xid || a->xid != b.xid || a->lsn != b.lsn ||
	    a->nextlsn != b.nextlsn || a->transactional != b.transactional ||
	    !same_text(a->timestamp, a->timestamp_len, b.timestamp, b.timestamp_len) ||
	    !same_text(a->schema, a->schema_len, b.schema, b.schema_len) ||
	    !same_text(a->table, a->table_len, b.table, b.table_len) ||
	    !same_text(a->prefix, a->prefix_len, b.prefix, b.prefix_len) ||
	    !same_text(a->content, a->content_len, b.content, b.content_len) ||
	    a->ncolumns != b.ncolumns)
		abort();
	for (size_t i = 0; i < a->ncolumns; i++) {
		const struct w2j_field *x = &a->columns[i], *y = &b.columns[i];

		if (x->kind != y->kind || !same_text(x->name, x->name_len, y->name, y->name_len) ||
		    !same_text(x->type, x->type_len, y->type, y->type_len) ||
		    !same_text(x->value, x->value_len, y->value, y->value_len))
			abort();
	}
}

/* The same for w2j_decode_object(). */
static void compare_objects(const char *buf, size_t size, bool ok, const struct w2j_field *a,
                            size_t na)
{
	struct w2j_field *b;
	size_t nb;

	if (!same_verdict(ok, w2j_decode_object(ref, buf, size, &b, &nb)))
		return;
	if (na != nb)
		abort();
	for (size_t i = 0; i < na; i++)
		if (a[i].kind != b[i].kind ||
		    !same_text(a[i].name, a[i].name_len, b[i].name, b[i].name_len) ||
		    !same_text(a[i].value, a[i].value_len, b[i].value, b[i].value_len))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct txn_info tx = {.commit_lsn = 0x1000, .has_xid = true, .xid = 7};
	struct w2j_change ch;
	struct w2j_field *fields;
	size_t n;
	struct event ev;
	const char *reason;

	bool ok;

	if (!dec)
		setup();
	ok = w2j_decode(dec, buf, size, &ch);
	compare_paths(buf, size, ok, &ch);
	if (ok) {
		if (ch.ncolumns > 0) {
			(void)mapper_map(map, &tx, 0, ch.columns, ch.ncolumns, buf, size, &ev, &reason);
			/* Touch every byte the event points at, as the sink would. */
			for (size_t i = 0; i < ev.nfields; i++)
				if (ev.fields[i].value_len &&
				    memchr(ev.fields[i].value, 0x01, ev.fields[i].value_len) == (void *)1)
					abort();
		}
		if (ch.action == W2J_MESSAGE && ch.content &&
		    w2j_decode_object(dec, ch.content, ch.content_len, &fields, &n))
			(void)mapper_map(map, &tx, 1, fields, n, buf, size, &ev, &reason);
	} else if (w2j_errmsg(dec)[0] == '\0') {
		abort(); /* a rejection must say why */
	}
	/* In place, on a copy: the same verdict and change as yajl; the copy
	 * changes only when the decode succeeded. */
	{
		char *copy = malloc(size ? size : 1);
		struct w2j_decoder *keep = dec;
		size_t olen;

		if (!copy)
			abort();
		memcpy(copy, buf, size);
		dec = inp; /* same_verdict() compares dec's message */
		ok = w2j_decode_inplace(inp, copy, size, 64, &ch);
		compare_paths(buf, size, ok, &ch);
		dec = keep;
		if (w2j_original(inp, &olen) ? !ok || memcmp(w2j_original(inp, &olen), buf, olen) != 0
		                             : memcmp(copy, buf, size) != 0)
			abort();
		free(copy);
	}
	ok = w2j_decode_object(dec, buf, size, &fields, &n);
	compare_objects(buf, size, ok, fields, n);
	if (ok)
		(void)mapper_map(map, &tx, 2, fields, n, buf, size, &ev, &reason);
	(void)w2j_json_valid(buf, size);
	return 0;
}
