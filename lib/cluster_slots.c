/*
 * cluster_slots.c - check and read the CLUSTER SLOTS and COMMAND INFO replies
 * (see cluster_slots.h). Every element is checked for its type before it is
 * read and every number for its range before it indexes anything: the map is
 * written only for slots in 0..16383 and node indexes below the limit.
 * Pure: no I/O, no logging.
 */
#include "cluster_slots.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"

static const char *type_name(int type)
{
	switch (type) {
	case REDIS_REPLY_STRING:
		return "a string";
	case REDIS_REPLY_ARRAY:
		return "an array";
	case REDIS_REPLY_INTEGER:
		return "an integer";
	case REDIS_REPLY_NIL:
		return "nil";
	case REDIS_REPLY_STATUS:
		return "a status";
	case REDIS_REPLY_ERROR:
		return "an error";
	default:
		return "a reply of an unknown type";
	}
}

/* Element i of array a, or NULL when a has fewer elements (or none stored). */
static const redisReply *elem(const redisReply *a, size_t i)
{
	if (a->type != REDIS_REPLY_ARRAY || i >= a->elements || !a->element)
		return NULL;
	return a->element[i];
}

/*
 * Check a node entry [host, port, id, ...] (what names it in messages) and
 * return its host (empty for "the seed") and port. Extra elements after the
 * id (Redis 7's metadata) are not read.
 */
static bool read_node(const redisReply *m, const char *what, size_t entry, const char **ret_host,
                      size_t *ret_len, int *ret_port, char *err, size_t errlen)
{
	const redisReply *h, *p, *id;
	char q[MSG_QUOTE_MAX + 8];

	if (!m) {
		msg_set(err, errlen, "entry %zu: the %s is missing", entry, what);
		return false;
	}
	if (m->type != REDIS_REPLY_ARRAY) {
		msg_set(err, errlen, "entry %zu: the %s is %s, not an array", entry, what,
		        type_name(m->type));
		return false;
	}
	h = elem(m, 0);
	p = elem(m, 1);
	if (!h || !p) {
		msg_set(err, errlen, "entry %zu: the %s has %zu elements, fewer than 2 (host, port)", entry,
		        what, m->elements);
		return false;
	}
	if (h->type == REDIS_REPLY_NIL) {
		*ret_host = "";
		*ret_len = 0;
	} else if (h->type == REDIS_REPLY_STRING && h->str) {
		if (h->len > CLUSTER_SLOTS_HOST_MAX) {
			msg_set(err, errlen, "entry %zu: the %s's host is %zu bytes, more than %d", entry, what,
			        h->len, CLUSTER_SLOTS_HOST_MAX);
			return false;
		}
		for (size_t i = 0; i < h->len; i++) {
			unsigned char c = (unsigned char)h->str[i];

			if (c < 0x20 || c == 0x7f) {
				msg_set(err, errlen, "entry %zu: the %s's host \"%s\" has a control byte", entry,
				        what, msg_quote(h->str, h->len, q, sizeof(q)));
				return false;
			}
		}
		*ret_host = h->str;
		*ret_len = h->len;
	} else {
		msg_set(err, errlen, "entry %zu: the %s's host is %s, not a string", entry, what,
		        type_name(h->type));
		return false;
	}
	if (p->type != REDIS_REPLY_INTEGER) {
		msg_set(err, errlen, "entry %zu: the %s's port is %s, not an integer", entry, what,
		        type_name(p->type));
		return false;
	}
	if (p->integer < 1 || p->integer > 65535) {
		msg_set(err, errlen, "entry %zu: the %s's port %lld is outside 1-65535", entry, what,
		        p->integer);
		return false;
	}
	id = elem(m, 2);
	if (id && id->type != REDIS_REPLY_STRING) {
		msg_set(err, errlen, "entry %zu: the %s's node id is %s, not a string", entry, what,
		        type_name(id->type));
		return false;
	}
	*ret_port = (int)p->integer;
	return true;
}

/* Index of host:port in map, added when new; -1 with err when the map is full. */
static int node_index(struct cluster_slots_map *map, const char *host, size_t len, int port,
                      char *err, size_t errlen)
{
	for (int i = 0; i < map->nnodes; i++)
		if (map->nodes[i].port == port && strlen(map->nodes[i].host) == len &&
		    memcmp(map->nodes[i].host, host, len) == 0)
			return i;
	if (map->nnodes == CLUSTER_SLOTS_MAX_NODES) {
		msg_set(err, errlen, "more than %d masters", CLUSTER_SLOTS_MAX_NODES);
		return -1;
	}
	memcpy(map->nodes[map->nnodes].host, host, len);
	map->nodes[map->nnodes].host[len] = '\0';
	map->nodes[map->nnodes].port = port;
	return map->nnodes++;
}

/* Check entry i, [start, end, master, replicas...], and assign its slots. */
static bool read_entry(struct cluster_slots_map *map, const redisReply *e, size_t i,
                       const char *seed_host, char *err, size_t errlen)
{
	const redisReply *start, *end;
	const char *host;
	size_t len;
	int port, idx;

	if (e->type != REDIS_REPLY_ARRAY) {
		msg_set(err, errlen, "entry %zu is %s, not an array", i, type_name(e->type));
		return false;
	}
	start = elem(e, 0);
	end = elem(e, 1);
	if (!start || !end || !elem(e, 2)) {
		msg_set(err, errlen, "entry %zu has %zu elements, fewer than 3 (start, end, master)", i,
		        e->elements);
		return false;
	}
	if (start->type != REDIS_REPLY_INTEGER || end->type != REDIS_REPLY_INTEGER) {
		msg_set(err, errlen, "entry %zu: the slot range is %s and %s, not two integers", i,
		        type_name(start->type), type_name(end->type));
		return false;
	}
	if (start->integer < 0 || end->integer >= CLUSTER_SLOTS_COUNT ||
	    start->integer > end->integer) {
		msg_set(err, errlen,
		        "entry %zu: start slot %lld and end slot %lld are not a range within 0-%d", i,
		        start->integer, end->integer, CLUSTER_SLOTS_COUNT - 1);
		return false;
	}
	if (!read_node(elem(e, 2), "master", i, &host, &len, &port, err, errlen))
		return false;
	for (size_t k = 3; k < e->elements; k++) {
		char what[32];
		const char *rh;
		size_t rlen;
		int rport;

		snprintf(what, sizeof(what), "replica %zu", k - 2);
		if (!read_node(elem(e, k), what, i, &rh, &rlen, &rport, err, errlen))
			return false;
	}
	if (len == 0) {
		host = seed_host;
		len = strlen(seed_host);
		if (len == 0 || len > CLUSTER_SLOTS_HOST_MAX) {
			msg_set(err, errlen, "entry %zu: the master has no host and the seed's is unusable", i);
			return false;
		}
	}
	idx = node_index(map, host, len, port, err, errlen);
	if (idx < 0)
		return false;
	/* The range is checked above: start..end lies within slot_node[]. */
	for (long long sl = start->integer; sl <= end->integer; sl++) {
		if (map->slot_node[sl] >= 0) {
			msg_set(err, errlen, "entry %zu: slot %lld is listed twice", i, sl);
			return false;
		}
		map->slot_node[sl] = (int8_t)idx;
	}
	return true;
}

struct cluster_slots_map *cluster_slots_parse(const struct redisReply *r, const char *seed_host,
                                              char *err, size_t errlen)
{
	struct cluster_slots_map *map;

	if (!r) {
		msg_set(err, errlen, "no reply");
		return NULL;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		msg_set(err, errlen, "the reply is %s, not an array", type_name(r->type));
		return NULL;
	}
	if (r->elements == 0) {
		msg_set(err, errlen, "no slots are assigned");
		return NULL;
	}
	map = malloc(sizeof(*map));
	if (!map) {
		(void)msg_oom(err, errlen);
		return NULL;
	}
	map->nnodes = 0;
	memset(map->slot_node, -1, sizeof(map->slot_node));
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = elem(r, i);

		if (!e) {
			msg_set(err, errlen, "entry %zu is missing", i);
			goto fail;
		}
		if (!read_entry(map, e, i, seed_host ? seed_host : "", err, errlen))
			goto fail;
	}
	return map;
fail:
	free(map);
	return NULL;
}

void cluster_slots_map_free(struct cluster_slots_map *map)
{
	free(map);
}

enum cluster_cmdinfo cluster_slots_command_info(const struct redisReply *r, size_t ncommands,
                                                size_t *ret_missing, char *err, size_t errlen)
{
	if (!r) {
		msg_set(err, errlen, "no reply");
		return CMDINFO_UNREADABLE;
	}
	if (r->type != REDIS_REPLY_ARRAY) {
		msg_set(err, errlen, "the reply is %s, not an array", type_name(r->type));
		return CMDINFO_UNREADABLE;
	}
	if (r->elements != ncommands) {
		msg_set(err, errlen, "the reply has %zu entries for %zu commands", r->elements, ncommands);
		return CMDINFO_UNREADABLE;
	}
	/* Check every entry first, so a verdict never rests on a malformed reply. */
	for (size_t i = 0; i < ncommands; i++) {
		const redisReply *e = elem(r, i);

		if (!e) {
			msg_set(err, errlen, "entry %zu is missing", i);
			return CMDINFO_UNREADABLE;
		}
		if (e->type != REDIS_REPLY_ARRAY && e->type != REDIS_REPLY_NIL) {
			msg_set(err, errlen, "entry %zu is %s, not an array or nil", i, type_name(e->type));
			return CMDINFO_UNREADABLE;
		}
	}
	for (size_t i = 0; i < ncommands; i++)
		if (r->element[i]->type == REDIS_REPLY_NIL) {
			*ret_missing = i;
			return CMDINFO_MISSING;
		}
	return CMDINFO_PRESENT;
}

/* See cluster_slots.h. */
uint16_t cluster_slots_crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((unsigned char)buf[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

/* See cluster_slots.h. */
unsigned cluster_slots_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open) {
		size_t rest = len - (size_t)(open - key) - 1;
		const char *close = memchr(open + 1, '}', rest);

		if (close && close > open + 1)
			return cluster_slots_crc16(open + 1, (size_t)(close - open - 1)) &
			       (CLUSTER_SLOTS_COUNT - 1);
	}
	return cluster_slots_crc16(key, len) & (CLUSTER_SLOTS_COUNT - 1);
}

/* See cluster_slots.h. */
bool cluster_slots_redirect(const char *msg, bool *ret_ask, unsigned *ret_slot, char *host,
                            size_t hostlen, int *ret_port)
{
	const char *p, *colon;
	char *end;
	unsigned long slot;
	long port;
	size_t hl;

	if (strncmp(msg, "MOVED ", 6) == 0) {
		*ret_ask = false;
		p = msg + 6;
	} else if (strncmp(msg, "ASK ", 4) == 0) {
		*ret_ask = true;
		p = msg + 4;
	} else {
		return false;
	}
	if (*p < '0' || *p > '9')
		return false;
	slot = strtoul(p, &end, 10);
	if (*end != ' ' || slot >= CLUSTER_SLOTS_COUNT)
		return false;
	p = end + 1;
	colon = strrchr(p, ':'); /* IPv6 hosts hold colons too: the port follows the last one */
	if (!colon || colon[1] < '0' || colon[1] > '9')
		return false;
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port < 1 || port > 65535)
		return false;
	hl = (size_t)(colon - p);
	if (hl >= hostlen || hl > CLUSTER_SLOTS_HOST_MAX)
		return false;
	for (size_t i = 0; i < hl; i++) {
		if ((unsigned char)p[i] <= ' ' || p[i] == 0x7f)
			return false;
	}
	memcpy(host, p, hl);
	host[hl] = '\0';
	*ret_slot = (unsigned)slot;
	*ret_port = (int)port;
	return true;
}
