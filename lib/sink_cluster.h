/*
 * sink_cluster.h - the relay's Redis Cluster discovery: the slot map from
 * the seeds of a redis-cluster:// target (lib/sink_cluster.c).
 *
 * Each seed in turn is connected through redis_conn.h (TLS, AUTH, timeouts)
 * and asked for CLUSTER SLOTS until a reply passes cluster_slots_parse().
 * The sink turns the map into its connections (sink_setup.c) and routes
 * commands by it (sink_redis.c); outbox-consume and status have their own client
 * (rclient.h). Blocking I/O; nothing here logs.
 */
#ifndef RELAY_SINK_CLUSTER_H
#define RELAY_SINK_CLUSTER_H

#include <stddef.h>

#include "cluster_slots.h"
#include "redis_conn.h"
#include "redis_url.h"

/*
 * Ask the seeds of t (t->seeds) for the slot map, each with timeout_ms for
 * the connect and the reply. REDIS_CONN_OK with *ret_map (free with
 * cluster_slots_map_free); otherwise err names the last seed's problem, and
 * REDIS_CONN_PERMANENT says no retry can help (a seed refused the
 * credentials, the ACL denies CLUSTER SLOTS, TLS files are unusable).
 */
enum redis_conn_status sink_cluster_discover(const struct redis_target *t, int timeout_ms,
                                             struct cluster_slots_map **ret_map, char *err,
                                             size_t errlen);

#endif
