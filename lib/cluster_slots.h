/*
 * cluster_slots.h - read the replies the Redis sink trusts when it discovers
 * its servers: CLUSTER SLOTS (which master serves which hash slot) and
 * COMMAND INFO (whether the server has the commands the relay needs).
 *
 * Pure: the input is a complete hiredis reply, nothing touches a socket and
 * nothing is logged. Whatever shape a server (or a man in the middle on a
 * plain-TCP link) sends, every element is type- and range-checked before it
 * is used; a reply that does not pass is refused with a one-line message.
 */
#ifndef RELAY_CLUSTER_SLOTS_H
#define RELAY_CLUSTER_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct redisReply;

#define CLUSTER_SLOTS_COUNT 16384
/* Most distinct masters a map may name (the sink's connection limit). */
#define CLUSTER_SLOTS_MAX_NODES 64
/* Longest host name or address taken from a reply (DNS names stop at 253). */
#define CLUSTER_SLOTS_HOST_MAX 255

struct cluster_slots_node {
	char host[CLUSTER_SLOTS_HOST_MAX + 1];
	int port; /* 1..65535 */
};

struct cluster_slots_map {
	int nnodes; /* 1..CLUSTER_SLOTS_MAX_NODES */
	struct cluster_slots_node nodes[CLUSTER_SLOTS_MAX_NODES];
	int8_t slot_node[CLUSTER_SLOTS_COUNT]; /* slot -> index into nodes, -1 unassigned */
};

/*
 * Read a CLUSTER SLOTS reply:
 *   [[start, end, [host, port, id, ...], [replica host, port, ...]...], ...]
 * start and end are integers with 0 <= start <= end < 16384, and no slot is
 * listed twice. A host is a string of at most CLUSTER_SLOTS_HOST_MAX bytes
 * without control bytes; an empty string or nil (Redis 7's "unknown
 * endpoint") means "the address the reply came from" and becomes seed_host.
 * Ports are integers in 1..65535. Replica entries are only type-checked: the
 * relay writes to masters only. Masters are numbered in order of first
 * appearance, one per distinct host:port.
 *
 * Returns a map the caller frees with cluster_slots_map_free(), or NULL with
 * a message in err (which does not repeat "CLUSTER SLOTS") for a refused
 * reply, no assigned slot at all, or out of memory. r is only read.
 */
struct cluster_slots_map *cluster_slots_parse(const struct redisReply *r, const char *seed_host,
                                              char *err, size_t errlen);

/* NULL is a no-op. */
void cluster_slots_map_free(struct cluster_slots_map *map);

/* CRC16-CCITT (XMODEM) of buf[0..len), the checksum Redis Cluster's key slots use. */
uint16_t cluster_slots_crc16(const char *buf, size_t len);

/*
 * The hash slot of key[0..len) as Redis Cluster computes it: CRC16 modulo
 * 16384 of the hash tag (what lies between the first '{' and the first '}'
 * after it, when that is not empty), else of the whole key.
 */
unsigned cluster_slots_key_slot(const char *key, size_t len);

/*
 * Read a MOVED or ASK redirection ("MOVED <slot> <host>:<port>", "ASK ...";
 * an empty host means the node that answered, whose address is then
 * written as empty). True with *ret_ask, *ret_slot, host and *ret_port set;
 * false for any other message or a malformed one.
 */
bool cluster_slots_redirect(const char *msg, bool *ret_ask, unsigned *ret_slot, char *host,
                            size_t hostlen, int *ret_port);

enum cluster_cmdinfo {
	CMDINFO_PRESENT,    /* every command asked about is known to the server */
	CMDINFO_MISSING,    /* *ret_missing: the first one it answered nil for */
	CMDINFO_UNREADABLE, /* not a verdict: err says why */
};

/*
 * Read the reply to COMMAND INFO name1 .. nameN (N = ncommands): an array of
 * exactly N entries, each an array (a known command) or nil (unknown or
 * renamed). *ret_missing (an index below ncommands) is written only for
 * CMDINFO_MISSING. Any other shape, an error reply included, is
 * CMDINFO_UNREADABLE with the reason in err. r is only read.
 */
enum cluster_cmdinfo cluster_slots_command_info(const struct redisReply *r, size_t ncommands,
                                                size_t *ret_missing, char *err, size_t errlen);

#endif
