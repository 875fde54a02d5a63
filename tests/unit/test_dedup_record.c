/*
 * test_dedup_record.c - unit tests for lib/dedup_record.c: the native path's
 * record of its own dedup ids. A set never says "no" of an id it holds, says
 * "perhaps" of few it does not, is used only at the count it was sealed at,
 * begins only with its bucket, and gives way to the budget. A bucket made by
 * someone else is read into a set a few hashes at a time (seeding), used once
 * every hash is read, and not read on once its count moved under it.
 */
#include "dedup_record.h"

#include <stdio.h>
#include <string.h>

#include "test.h"

static uint64_t id_hash(const char *pre, unsigned i)
{
	char f[64];
	int n = snprintf(f, sizeof(f), "%s-%u", pre, i);

	return drec_hash(f, (size_t)n);
}

/* Open bucket "7200:9" of stream s as made by a write, add ids pre-0..n-1, seal at n. */
static struct drec_set *fill(struct drec *r, const char *s, const char *name, int64_t start,
                             const char *pre, unsigned n)
{
	struct drec_set *set = drec_open(r, s, strlen(s), name, start, true, 0, 0);

	for (unsigned i = 0; i < n; i++)
		drec_add(r, set, id_hash(pre, i));
	drec_seal(set, n, n / 24 + 1);
	return set;
}

TEST(no_false_no)
{
	struct drec_budget bud = {64u << 20, 0};
	struct drec *r = drec_new(&bud);
	const struct drec_set *set;
	unsigned perhaps = 0, n = 100000, asked = 100000;

	CHECK(r != NULL);
	CHECK(fill(r, "outbox:a", "7200:9", 64800, "id", n) != NULL);
	set = drec_get(r, "outbox:a", 8, "7200:9", n);
	CHECK(set != NULL);
	for (unsigned i = 0; set && i < n; i++)
		if (!drec_may_hold(set, id_hash("id", i))) {
			CHECK(!"an id it holds is said to be absent");
			break;
		}
	for (unsigned i = 0; set && i < asked; i++)
		perhaps += drec_may_hold(set, id_hash("other", i));
	/* Five filters of 10 bits an id: about 1 % each when full, a few % in all. */
	CHECK(perhaps < asked / 20);
	CHECK(drec_bytes(r) == bud.used);
	CHECK(drec_bytes(r) < (size_t)n * 4); /* ~16 bits an id with the series' slack */
	printf("# %u of %u absent ids 'perhaps'; %zu bytes for %u ids\n", perhaps, asked, drec_bytes(r),
	       n);
	drec_free(r);
	CHECK(bud.used == 0);
}

TEST(count_must_match)
{
	struct drec_budget bud = {1u << 20, 0};
	struct drec *r = drec_new(&bud);
	struct drec_set *set;

	fill(r, "s", "7200:9", 64800, "a", 10);
	CHECK(drec_get(r, "s", 1, "7200:9", 10) != NULL);
	CHECK(drec_get(r, "s", 1, "7200:9", 11) == NULL); /* another writer added an id */
	CHECK(drec_get(r, "s", 1, "7200:8", 10) == NULL);
	CHECK(drec_get(r, "t", 1, "7200:9", 10) == NULL);
	/* A write from count 10 to 12 goes on; one from 11 (another id came between) ends it. */
	set = drec_open(r, "s", 1, "7200:9", 64800, false, 10, 1);
	CHECK(set != NULL);
	drec_add(r, set, id_hash("a", 10));
	drec_add(r, set, id_hash("a", 11));
	drec_seal(set, 12, 1);
	CHECK(drec_get(r, "s", 1, "7200:9", 12) != NULL);
	CHECK(drec_open(r, "s", 1, "7200:9", 64800, false, 13, 1) == NULL);
	CHECK(drec_get(r, "s", 1, "7200:9", 12) == NULL);
	CHECK(drec_get(r, "s", 1, "7200:9", 13) == NULL);
	/* Not begun with its bucket: never recorded. */
	CHECK(drec_open(r, "s", 1, "7200:10", 72000, false, 0, 1) == NULL);
	CHECK(drec_get(r, "s", 1, "7200:10", 0) == NULL);
	drec_free(r);
}

TEST(two_newest_buckets)
{
	struct drec_budget bud = {1u << 20, 0};
	struct drec *r = drec_new(&bud);

	fill(r, "s", "7200:9", 64800, "a", 5);
	fill(r, "s", "7200:10", 72000, "b", 6);
	CHECK(drec_get(r, "s", 1, "7200:9", 5) != NULL);
	CHECK(drec_get(r, "s", 1, "7200:10", 6) != NULL);
	fill(r, "s", "7200:11", 79200, "c", 7); /* bucket 9 is out of the window now */
	CHECK(drec_get(r, "s", 1, "7200:9", 5) == NULL);
	CHECK(drec_get(r, "s", 1, "7200:10", 6) != NULL);
	CHECK(drec_get(r, "s", 1, "7200:11", 7) != NULL);
	/* A bucket made again (the index lost it): the old ids are forgotten. */
	fill(r, "s", "7200:11", 79200, "d", 1);
	CHECK(drec_get(r, "s", 1, "7200:11", 1) != NULL);
	CHECK(!drec_may_hold(drec_get(r, "s", 1, "7200:11", 1), id_hash("c", 0)) ||
	      !drec_may_hold(drec_get(r, "s", 1, "7200:11", 1), id_hash("c", 1)));
	drec_clear(r);
	CHECK(drec_get(r, "s", 1, "7200:11", 1) == NULL);
	CHECK(bud.used == 0);
	drec_free(r);
}

TEST(budget)
{
	struct drec_budget bud = {12288, 0}; /* two first filters (5 KiB each), not a third */
	struct drec *a = drec_new(&bud), *b = drec_new(&bud);

	CHECK(fill(a, "s", "7200:9", 64800, "a", 100) != NULL);
	CHECK(drec_get(a, "s", 1, "7200:9", 100) != NULL);
	fill(b, "s", "7200:9", 64800, "b", 100);
	CHECK(drec_get(b, "s", 1, "7200:9", 100) != NULL);
	CHECK(bud.used == drec_bytes(a) + drec_bytes(b));
	fill(a, "t", "7200:9", 64800, "c", 100); /* a third: over the budget, not recorded */
	CHECK(drec_get(a, "t", 1, "7200:9", 100) == NULL);
	CHECK(bud.used <= bud.limit);
	drec_free(b);
	CHECK(bud.used == drec_bytes(a));
	/* Room for a first filter again, not for the second (twice its size) it grows to. */
	fill(a, "u", "7200:9", 64800, "d", 5000);
	CHECK(drec_get(a, "u", 1, "7200:9", 5000) == NULL);
	CHECK(drec_get(a, "s", 1, "7200:9", 100) != NULL);
	CHECK(bud.used == drec_bytes(a));
	CHECK(bud.used <= bud.limit);
	drec_free(a);
	CHECK(bud.used == 0);
}

TEST(streams_least_recently_used_go)
{
	struct drec_budget bud = {64u << 20, 0};
	struct drec *r = drec_new(&bud);
	char s[16];

	for (int i = 0; i < 65; i++) {
		snprintf(s, sizeof(s), "st%d", i);
		fill(r, s, "7200:9", 64800, s, 3);
	}
	CHECK(drec_get(r, "st0", 3, "7200:9", 3) == NULL);
	CHECK(drec_get(r, "st1", 3, "7200:9", 3) != NULL);
	CHECK(drec_get(r, "st64", 4, "7200:9", 3) != NULL);
	drec_free(r);
	CHECK(bud.used == 0);
}

/* Read hashes [from, to) of a bucket with K k and count c: ids pre-j-0..per-1 of each hash j. */
static struct drec_set *seed_chunk(struct drec *r, const char *s, const char *name, int64_t start,
                                   uint32_t k, uint32_t c, uint32_t from, uint32_t to, unsigned per)
{
	struct drec_set *set = drec_seed(r, s, strlen(s), name, start, k, c, from);
	char pre[32];

	for (uint32_t j = from; set && j < to; j++) {
		snprintf(pre, sizeof(pre), "h%u", j);
		for (unsigned i = 0; i < per; i++)
			drec_add(r, set, id_hash(pre, i));
	}
	drec_seed_done(set, to);
	return set;
}

TEST(seed_reads_every_hash_then_is_used)
{
	struct drec_budget bud = {64u << 20, 0};
	struct drec *r = drec_new(&bud);
	uint32_t from = 99, to = 99;
	const struct drec_set *got;
	struct drec_set *set;
	char pre[32];

	/* Bucket 7200:9 of someone else: 10 hashes, 240 ids; 4 hashes a group. */
	CHECK(drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 10, 240, 4, &from, &to));
	CHECK(from == 0 && to == 4);
	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 10, 240, 0, 4, 24) != NULL);
	CHECK(drec_get(r, "outbox:a", 8, "7200:9", 240) == NULL); /* not all read yet */
	/*
	 * This connection writes 5 ids meanwhile and grows K to 12 (the write's set
	 * is the seed's; the ids its split moved are among those it adds).
	 */
	set = drec_open(r, "outbox:a", 8, "7200:9", 64800, false, 240, 10);
	CHECK(set != NULL && drec_seeding(set));
	for (unsigned i = 0; i < 5; i++)
		drec_add(r, set, id_hash("own", i));
	drec_seal(set, 245, 12);
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 12, 240, 4, &from, &to));
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 10, 245, 4, &from, &to));
	CHECK(drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 12, 245, 4, &from, &to));
	CHECK(from == 4 && to == 8);
	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 12, 245, 4, 8, 24) != NULL);
	CHECK(drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 12, 245, 4, &from, &to));
	CHECK(from == 8 && to == 10); /* up to the K of the first read */
	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 12, 245, 8, 10, 24) != NULL);
	got = drec_get(r, "outbox:a", 8, "7200:9", 245);
	CHECK(got != NULL);
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 10, 245, 4, &from, &to));
	for (uint32_t j = 0; got && j < 10; j++) {
		snprintf(pre, sizeof(pre), "h%u", j);
		for (unsigned i = 0; i < 24; i++)
			CHECK(drec_may_hold(got, id_hash(pre, i)));
	}
	for (unsigned i = 0; got && i < 5; i++)
		CHECK(drec_may_hold(got, id_hash("own", i)));
	drec_free(r);
	CHECK(bud.used == 0);
}

TEST(seed_stops_when_someone_else_writes)
{
	struct drec_budget bud = {64u << 20, 0};
	struct drec *r = drec_new(&bud);
	uint32_t from, to;

	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 10, 240, 0, 4, 24) != NULL);
	/* Another writer took the count to 241: no more reads, and the set is dropped. */
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 10, 241, 4, &from, &to));
	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 10, 241, 4, 8, 24) == NULL);
	CHECK(drec_get(r, "outbox:a", 8, "7200:9", 241) == NULL);
	/* Dropped: it is not read again while the bucket lasts. */
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 10, 241, 4, &from, &to));
	CHECK(drec_seed(r, "outbox:a", 8, "7200:9", 64800, 10, 241, 0) == NULL);
	/* A write of this connection from a count the seed did not reach drops it too. */
	CHECK(seed_chunk(r, "outbox:a", "7300:9", 65700, 2, 30, 0, 1, 15) != NULL);
	CHECK(drec_open(r, "outbox:a", 8, "7300:9", 65700, false, 31, 2) == NULL);
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7300:9", 65700, 2, 31, 4, &from, &to));
	/* A chunk read out of turn (not where the seed is) drops it. */
	CHECK(seed_chunk(r, "outbox:b", "7200:9", 64800, 10, 240, 0, 4, 24) != NULL);
	CHECK(seed_chunk(r, "outbox:b", "7200:9", 64800, 10, 240, 6, 8, 24) == NULL);
	CHECK(drec_get(r, "outbox:b", 8, "7200:9", 240) == NULL);
	drec_free(r);
	CHECK(bud.used == 0);
}

/*
 * Another writer grows K without adding an id (the function grows a bucket of
 * at most 1024 ids for the ids it expects, even when all of its events are
 * duplicates): ids of the hashes not read yet may have moved past the K of the
 * first read, where the seed would never read them. The count alone did not
 * see it (the review's case: K 40 -> 64 at count 900, 223 of 900 ids then said
 * absent); K does, and the set is dropped.
 */
TEST(seed_stops_when_someone_else_splits)
{
	struct drec_budget bud = {64u << 20, 0};
	struct drec *r = drec_new(&bud);
	uint32_t from, to;

	CHECK(drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 40, 900, 16, &from, &to));
	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 40, 900, 0, 16, 22) != NULL);
	/* Read 1 now finds K 64 at the same count: no more reads, nothing used. */
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 64, 900, 16, &from, &to));
	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 64, 900, 16, 40, 22) == NULL);
	CHECK(drec_get(r, "outbox:a", 8, "7200:9", 900) == NULL);
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 64, 900, 16, &from, &to));
	/* The same seen first by this connection's own write (from K 64): dropped. */
	CHECK(seed_chunk(r, "outbox:b", "7200:9", 64800, 40, 900, 0, 16, 22) != NULL);
	CHECK(drec_open(r, "outbox:b", 8, "7200:9", 64800, false, 900, 64) == NULL);
	CHECK(!drec_seed_range(r, "outbox:b", 8, "7200:9", 64800, 64, 901, 16, &from, &to));
	CHECK(drec_get(r, "outbox:b", 8, "7200:9", 901) == NULL);
	/* A set begun with its bucket holds its ids wherever they sit: K does not matter. */
	CHECK(fill(r, "outbox:c", "7200:9", 64800, "id", 100) != NULL);
	CHECK(drec_open(r, "outbox:c", 8, "7200:9", 64800, false, 100, 64) != NULL);
	CHECK(drec_get(r, "outbox:c", 8, "7200:9", 100) != NULL);
	drec_free(r);
	CHECK(bud.used == 0);
}

TEST(seed_keeps_the_newer_buckets)
{
	struct drec_budget bud = {64u << 20, 0};
	struct drec *r = drec_new(&bud);
	uint32_t from, to;

	/* This connection made 7200:10 and 7200:9 is read: both are kept. */
	CHECK(fill(r, "outbox:a", "7200:10", 72000, "new", 30) != NULL);
	CHECK(drec_seed_range(r, "outbox:a", 8, "7200:9", 64800, 1, 20, 4, &from, &to));
	CHECK(seed_chunk(r, "outbox:a", "7200:9", 64800, 1, 20, 0, 1, 20) != NULL);
	CHECK(drec_get(r, "outbox:a", 8, "7200:9", 20) != NULL);
	CHECK(drec_get(r, "outbox:a", 8, "7200:10", 30) != NULL);
	/* An older bucket than both: no room, nothing read. */
	CHECK(!drec_seed_range(r, "outbox:a", 8, "7200:8", 57600, 1, 20, 4, &from, &to));
	CHECK(seed_chunk(r, "outbox:a", "7200:8", 57600, 1, 20, 0, 1, 20) == NULL);
	CHECK(drec_get(r, "outbox:a", 8, "7200:10", 30) != NULL);
	CHECK(drec_get(r, "outbox:a", 8, "7200:9", 20) != NULL);
	/* No budget for the ids a bucket holds: not read. */
	bud.limit = bud.used + 1000;
	CHECK(!drec_seed_range(r, "outbox:c", 8, "7200:9", 64800, 500, 12000, 4, &from, &to));
	/* Nothing read when seeding is off (chunk 0). */
	CHECK(!drec_seed_range(r, "outbox:d", 8, "7200:9", 64800, 1, 1, 0, &from, &to));
	drec_free(r);
	CHECK(bud.used == 0);
}

int main(void)
{
	RUN(no_false_no);
	RUN(count_must_match);
	RUN(two_newest_buckets);
	RUN(budget);
	RUN(streams_least_recently_used_go);
	RUN(seed_reads_every_hash_then_is_used);
	RUN(seed_stops_when_someone_else_writes);
	RUN(seed_stops_when_someone_else_splits);
	RUN(seed_keeps_the_newer_buckets);
	return test_done();
}
