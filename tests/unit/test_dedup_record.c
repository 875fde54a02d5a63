/*
 * test_dedup_record.c - unit tests for lib/dedup_record.c: the native path's
 * record of its own dedup ids. A set never says "no" of an id it holds, says
 * "perhaps" of few it does not, is used only at the count it was sealed at,
 * begins only with its bucket, and gives way to the budget.
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
	struct drec_set *set = drec_open(r, s, strlen(s), name, start, true, 0);

	for (unsigned i = 0; i < n; i++)
		drec_add(r, set, id_hash(pre, i));
	drec_seal(set, n);
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
	set = drec_open(r, "s", 1, "7200:9", 64800, false, 10);
	CHECK(set != NULL);
	drec_add(r, set, id_hash("a", 10));
	drec_add(r, set, id_hash("a", 11));
	drec_seal(set, 12);
	CHECK(drec_get(r, "s", 1, "7200:9", 12) != NULL);
	CHECK(drec_open(r, "s", 1, "7200:9", 64800, false, 13) == NULL);
	CHECK(drec_get(r, "s", 1, "7200:9", 12) == NULL);
	CHECK(drec_get(r, "s", 1, "7200:9", 13) == NULL);
	/* Not begun with its bucket: never recorded. */
	CHECK(drec_open(r, "s", 1, "7200:10", 72000, false, 0) == NULL);
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

int main(void)
{
	RUN(no_false_no);
	RUN(count_must_match);
	RUN(two_newest_buckets);
	RUN(budget);
	RUN(streams_least_recently_used_go);
	return test_done();
}
