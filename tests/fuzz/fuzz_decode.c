/*
 * fuzz_decode.c - libFuzzer target for the wal2json decoder and the event
 * mapper: whatever bytes arrive as an XLogData payload, the relay must decode
 * them or reject them with a message, and map what it decodes (or
 * dead-letter it), without crashing, leaking or reading out of bounds.
 *
 * Built and run by tests/fuzz/run.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "wal2json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct w2j_decoder *dec;
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
	map = mapper_create(&cf, err, sizeof(err));
	if (!dec || !map)
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

	if (!dec)
		setup();
	if (w2j_decode(dec, buf, size, &ch)) {
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
	if (w2j_decode_object(dec, buf, size, &fields, &n))
		(void)mapper_map(map, &tx, 2, fields, n, buf, size, &ev, &reason);
	(void)w2j_json_valid(buf, size);
	return 0;
}
