/*
 * fuzz_replies.c - libFuzzer target for the reply parsers of
 * lib/cluster_slots.c: whatever bytes a Redis server (or a man in the middle
 * on a plain-TCP link) sends, hiredis's reader turns them into replies, and
 * the CLUSTER SLOTS and COMMAND INFO parsers must read them or refuse them
 * with a one-line message, without crashing, leaking or touching memory out
 * of bounds. A map they accept must hold only what the sink may index.
 *
 * Built and run by tests/fuzz/run.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_slots.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * hiredis 0.14 callocs an array of the announced length before any element
 * arrives ("*2000000000\r\n" asks for 16 GB); the fuzzer's malloc limit would
 * report that as a finding of ours. Arrays are capped here, which the reader
 * reports as out of memory.
 */
#define FUZZ_MAX_ELEMENTS 100000

/* The element count is an int in hiredis 0.14 (Debian 12), a size_t from 1.0 on (build-tls). */
#if HIREDIS_MAJOR >= 1
typedef size_t nelements;
#else
typedef int nelements;
#endif

static redisReplyObjectFunctions capped;
static void *(*create_array)(const redisReadTask *, nelements);

static void *capped_array(const redisReadTask *task, nelements elements)
{
	if (elements > FUZZ_MAX_ELEMENTS)
		return NULL;
	return create_array(task, elements);
}

/* One printable line (abort() otherwise). */
static void check_message(const char *err)
{
	if (err[0] == '\0')
		abort(); /* a refusal must say why */
	for (const char *c = err; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			abort();
}

/* Everything the sink reads from an accepted map is in range (abort() otherwise). */
static void check_map(const struct cluster_slots_map *m)
{
	bool any = false;

	if (m->nnodes < 1 || m->nnodes > CLUSTER_SLOTS_MAX_NODES)
		abort();
	for (int i = 0; i < m->nnodes; i++) {
		size_t len = strnlen(m->nodes[i].host, sizeof(m->nodes[i].host));

		if (len == 0 || len > CLUSTER_SLOTS_HOST_MAX || m->nodes[i].port < 1 ||
		    m->nodes[i].port > 65535)
			abort();
		for (size_t k = 0; k < len; k++)
			if ((unsigned char)m->nodes[i].host[k] < 0x20 || m->nodes[i].host[k] == 0x7f)
				abort();
	}
	for (int sl = 0; sl < CLUSTER_SLOTS_COUNT; sl++) {
		if (m->slot_node[sl] < -1 || m->slot_node[sl] >= m->nnodes)
			abort();
		any |= m->slot_node[sl] >= 0;
	}
	if (!any)
		abort();
}

static void parse(const redisReply *r)
{
	char err[256];
	struct cluster_slots_map *m;
	size_t missing;

	err[0] = '\0';
	m = cluster_slots_parse(r, "seed.example", err, sizeof(err));
	if (m)
		check_map(m);
	else
		check_message(err);
	cluster_slots_map_free(m);

	for (size_t n = 3; n <= 4; n++) {
		err[0] = '\0';
		switch (cluster_slots_command_info(r, n, &missing, err, sizeof(err))) {
		case CMDINFO_PRESENT:
			break;
		case CMDINFO_MISSING:
			if (missing >= n)
				abort();
			break;
		case CMDINFO_UNREADABLE:
			check_message(err);
			break;
		default:
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReader *rd = redisReaderCreate();
	void *reply;

	if (!rd)
		return 0;
	if (!create_array) {
		capped = *rd->fn;
		create_array = capped.createArray;
		capped.createArray = capped_array;
	}
	rd->fn = &capped;
	if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
		/* Every complete reply in the input, as a connection would read them. */
		for (int i = 0; i < 16; i++) {
			reply = NULL;
			if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
				break;
			parse(reply);
			freeReplyObject(reply);
		}
	}
	redisReaderFree(rd);
	return 0;
}
