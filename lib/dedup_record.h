/*
 * dedup_record.h - what --publish native remembers of the ids its own writes
 * put into the live dedup buckets (--dedup-record), so that read 2 can leave
 * out the lookups of ids no bucket can hold.
 *
 * Per stream (the DREC_STREAMS used last on a connection) and per bucket (the
 * two newest), a series of Bloom filters of the ids this connection wrote
 * there, with the index's count of ids after its last recorded write. A set is
 * complete, and used, only while that count is what read 1 finds: ids are
 * never taken out of a live bucket, so another writer's id (a second relay, the
 * function) raises the count and the set is not used again. A set begins only
 * with the bucket: when this connection's write created it. A filter may say
 * "perhaps" of an id it does not hold (about 1 %: that id is looked up as
 * before), never "no" of one it holds.
 *
 * Seeding: a bucket this connection did not make (after a start or a
 * reconnect) is read into a set instead, a few of its hashes (HKEYS) per
 * group, each read going into the record only when its group's EXEC succeeded.
 * Ids move between hashes only when K grows: by this connection's own write
 * (whose moved ids it read whole in read 2 and adds too) or by another
 * writer's, which may add no id (the function and the native path grow a
 * bucket of at most 1024 ids for the ids they expect) and so is seen by K, not
 * by the count. So once every hash below the K the first read found has been
 * read, the set holds every id the bucket had at that first read and every id
 * added since, as long as the count and K went only where this connection's
 * writes took them; from then on it is used as a set begun with the bucket is.
 *
 * One owner: struct drec (one per connection, the native path's) holds every
 * set and filter; struct drec_budget (the sink's) counts the filters' bytes
 * of all connections against --dedup-record. A set that would pass the budget
 * is dropped (its bucket is looked up in full until it ends).
 */
#ifndef OUTBOX_DEDUP_RECORD_H
#define OUTBOX_DEDUP_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct drec_budget {
	size_t limit; /* bytes of filters, all connections; 0: no record */
	size_t used;
};

struct drec;
struct drec_set;

struct drec *drec_new(struct drec_budget *bud);
void drec_free(struct drec *r); /* NULL is a no-op */
/* Forget every set (a new connection: maybe another server). */
void drec_clear(struct drec *r);

/* The hash an id is recorded under (the dedup field's bytes as the bucket holds them). */
uint64_t drec_hash(const void *p, size_t n);

/*
 * Bucket `name` of `stream`, when the record holds every id it has at the
 * index's count c; else NULL (look everything up).
 */
const struct drec_set *drec_get(struct drec *r, const char *stream, size_t slen, const char *name,
                                uint32_t c);
/* Whether the set may hold the id: false means it is not in the bucket. */
bool drec_may_hold(const struct drec_set *set, uint64_t h);

/*
 * After an EXEC succeeded that took bucket `name` (starting at second `start`)
 * from count c0 and K k0 (read 1's) to c1 and k1 (created: the index had no
 * such bucket before it): drec_open gives the set to add the write's new ids
 * to, or NULL when the bucket is not recorded (it drops a set it cannot vouch
 * for); drec_add each id; drec_seal(c1, k1) once.
 */
struct drec_set *drec_open(struct drec *r, const char *stream, size_t slen, const char *name,
                           int64_t start, bool created, uint32_t c0, uint32_t k0);
void drec_add(struct drec *r, struct drec_set *set, uint64_t h);
void drec_seal(struct drec_set *set, uint32_t c1, uint32_t k1);

/* Whether set is still being read (its write's ids that moved between hashes go in too). */
bool drec_seeding(const struct drec_set *set);

/*
 * Seeding. drec_seed_range: which of bucket `name`'s hashes, [from, to), to
 * read next, at most chunk of them, when read 1 found it with K k and count c;
 * false when the bucket is recorded, dropped, being read but someone else has
 * written since (the count or K is not the set's), has no room among the
 * stream's two sets, or the budget has no room for about c ids. It changes
 * nothing: after the EXEC of the group that read them succeeded, drec_seed
 * (the same k and c, and from) gives the set to drec_add the ids read into, or
 * NULL (it drops a set whose count or K moved), and drec_seed_done(to) then
 * marks them read. drec_seed before drec_open of the same write.
 */
bool drec_seed_range(struct drec *r, const char *stream, size_t slen, const char *name,
                     int64_t start, uint32_t k, uint32_t c, uint32_t chunk, uint32_t *from,
                     uint32_t *to);
struct drec_set *drec_seed(struct drec *r, const char *stream, size_t slen, const char *name,
                           int64_t start, uint32_t k, uint32_t c, uint32_t from);
void drec_seed_done(struct drec_set *set, uint32_t to);

/* Bytes of filters this connection holds (for tests and the final log line). */
size_t drec_bytes(const struct drec *r);

#endif
