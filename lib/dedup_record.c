/*
 * dedup_record.c - the native path's record of its own dedup ids (the header
 * says what it is for and when a set may be trusted).
 *
 * A set is a series of blocked Bloom filters: the first holds DREC_FIRST ids,
 * each next one twice as many as the one before, so a bucket whose final size
 * is not known ahead costs about DREC_BITS bits per id and a few filters to
 * ask. An id sets DREC_K bits of one 512-bit block (one cache line per filter
 * asked); at DREC_BITS bits per id a full filter answers "perhaps" for about
 * 1 % of the ids it does not hold.
 */
#include "dedup_record.h"

#include <stdlib.h>
#include <string.h>

#define DREC_STREAMS 64 /* streams remembered per connection (least recently used goes) */
#define DREC_FIRST 4096 /* ids the first filter of a set holds */
#define DREC_BITS 10    /* bits per id */
#define DREC_K 7        /* bits an id sets, in one block */
#define BLOCK_WORDS 8   /* 512 bits */

struct filt {
	uint64_t *w; /* nblk blocks of BLOCK_WORDS words */
	uint32_t nblk;
	uint32_t cap, n;
};

struct drec_set {
	char name[48]; /* the index field: "<S>:<b>" ("" a free slot) */
	int64_t start;
	uint32_t c; /* the index's count of ids after the last write recorded */
	uint32_t k; /* the index's K at that count (read 1's, or after this connection's write) */
	bool live;  /* holds every id of the bucket at count c */
	/*
	 * Being read (drec_seed): holds every id of the bucket's hashes below next
	 * as they stood when read, every id this connection added or moved since
	 * the first read, and was at count c and K k after each; complete (live)
	 * once next reaches k0, the K the first read found. Another writer's split
	 * moves ids without changing the count (the function grows a small bucket
	 * for the ids it expects, even when it adds none): a K other than k drops
	 * the set, since ids of a hash not read yet may have gone past k0.
	 */
	bool seeding;
	uint32_t next, k0;
	struct filt *f;
	size_t nf, capf;
};

struct drec_stream {
	char *key; /* klen 0: a free slot */
	size_t klen;
	uint64_t used;
	struct drec_set set[2]; /* the two newest buckets */
};

struct drec {
	struct drec_budget *bud;
	struct drec_stream st[DREC_STREAMS];
	uint64_t clock;
	size_t bytes;
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t drec_hash(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return mix(h ^ (uint64_t)n);
}

struct drec *drec_new(struct drec_budget *bud)
{
	struct drec *r = calloc(1, sizeof(*r));

	if (r)
		r->bud = bud;
	return r;
}

static void set_drop(struct drec *r, struct drec_set *set)
{
	for (size_t i = 0; i < set->nf; i++) {
		size_t b = (size_t)set->f[i].nblk * BLOCK_WORDS * sizeof(uint64_t);

		free(set->f[i].w);
		r->bytes -= b;
		r->bud->used -= b;
	}
	set->nf = 0;
	set->live = set->seeding = false;
}

/* Whether the set takes the ids of this connection's writes: complete, or being read. */
static bool takes_ids(const struct drec_set *set)
{
	return set->live || set->seeding;
}

static void set_free(struct drec *r, struct drec_set *set)
{
	set_drop(r, set);
	free(set->f);
	set->f = NULL;
	set->capf = 0;
	set->name[0] = '\0';
}

void drec_clear(struct drec *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < DREC_STREAMS; i++) {
		for (int k = 0; k < 2; k++)
			set_free(r, &r->st[i].set[k]);
		r->st[i].klen = 0;
	}
}

void drec_free(struct drec *r)
{
	if (!r)
		return;
	drec_clear(r);
	for (size_t i = 0; i < DREC_STREAMS; i++)
		free(r->st[i].key);
	free(r);
}

size_t drec_bytes(const struct drec *r)
{
	return r ? r->bytes : 0;
}

static struct drec_stream *stream_find(struct drec *r, const char *key, size_t len)
{
	for (size_t i = 0; i < DREC_STREAMS; i++) {
		struct drec_stream *st = &r->st[i];

		if (st->klen == len && len > 0 && memcmp(st->key, key, len) == 0) {
			st->used = ++r->clock;
			return st;
		}
	}
	return NULL;
}

/* The stream's slot, a new one in the slot used least recently when it has none. */
static struct drec_stream *stream_slot(struct drec *r, const char *key, size_t len)
{
	struct drec_stream *st = stream_find(r, key, len), *old = &r->st[0];
	char *copy;

	if (st || len == 0)
		return st;
	for (size_t i = 1; i < DREC_STREAMS; i++)
		if (r->st[i].klen == 0 || (old->klen > 0 && r->st[i].used < old->used))
			old = &r->st[i];
	for (int k = 0; k < 2; k++)
		set_free(r, &old->set[k]);
	old->klen = 0;
	if (!(copy = realloc(old->key, len)))
		return NULL;
	memcpy(copy, key, len);
	old->key = copy;
	old->klen = len;
	old->used = ++r->clock;
	return old;
}

static struct drec_set *set_find(struct drec_stream *st, const char *name)
{
	for (int k = 0; k < 2; k++)
		if (st->set[k].name[0] && strcmp(st->set[k].name, name) == 0)
			return &st->set[k];
	return NULL;
}

const struct drec_set *drec_get(struct drec *r, const char *stream, size_t slen, const char *name,
                                uint32_t c)
{
	struct drec_stream *st = r ? stream_find(r, stream, slen) : NULL;
	struct drec_set *set = st ? set_find(st, name) : NULL;

	return set && set->live && set->c == c ? set : NULL;
}

/* The block an id falls in, and its bits there (9-bit positions). */
static uint32_t block_of(uint64_t h, uint32_t nblk)
{
	return (uint32_t)(((h >> 32) * (uint64_t)nblk) >> 32);
}

static bool filt_has(const struct filt *f, uint64_t h)
{
	const uint64_t *w = f->w + (size_t)block_of(h, f->nblk) * BLOCK_WORDS;
	uint64_t g = mix(h ^ 0x9e3779b97f4a7c15ULL);

	for (int k = 0; k < DREC_K; k++, g >>= 9)
		if (!(w[(g & 511) >> 6] & (1ULL << (g & 63))))
			return false;
	return true;
}

static void filt_put(struct filt *f, uint64_t h)
{
	uint64_t *w = f->w + (size_t)block_of(h, f->nblk) * BLOCK_WORDS;
	uint64_t g = mix(h ^ 0x9e3779b97f4a7c15ULL);

	for (int k = 0; k < DREC_K; k++, g >>= 9)
		w[(g & 511) >> 6] |= 1ULL << (g & 63);
	f->n++;
}

bool drec_may_hold(const struct drec_set *set, uint64_t h)
{
	for (size_t i = 0; i < set->nf; i++)
		if (filt_has(&set->f[i], h))
			return true;
	return false;
}

struct drec_set *drec_open(struct drec *r, const char *stream, size_t slen, const char *name,
                           int64_t start, bool created, uint32_t c0, uint32_t k0)
{
	struct drec_stream *st;
	struct drec_set *set;

	if (!r || strlen(name) >= sizeof(set->name))
		return NULL;
	if (!created) {
		st = stream_find(r, stream, slen);
		set = st ? set_find(st, name) : NULL;
		if (!set)
			return NULL;
		if (takes_ids(set) && set->c == c0 && (set->live || set->k == k0))
			return set;
		/* Another writer's ids came between, or its split moved ids of hashes not read yet. */
		set_drop(r, set);
		return NULL;
	}
	if (!(st = stream_slot(r, stream, slen)))
		return NULL;
	if (!(set = set_find(st, name))) {
		/* The bucket begins: it takes the place of the older of the two. */
		set = !st->set[0].name[0]                    ? &st->set[0]
		      : !st->set[1].name[0]                  ? &st->set[1]
		      : st->set[0].start <= st->set[1].start ? &st->set[0]
		                                             : &st->set[1];
		set_free(r, set);
	}
	set_drop(r, set);
	memcpy(set->name, name, strlen(name) + 1);
	set->start = start;
	set->c = 0;
	set->live = r->bud->limit > 0;
	return set->live ? set : NULL;
}

void drec_add(struct drec *r, struct drec_set *set, uint64_t h)
{
	struct filt *f;

	if (!set || !takes_ids(set))
		return;
	if (set->nf == 0 || set->f[set->nf - 1].n >= set->f[set->nf - 1].cap) {
		uint64_t cap = set->nf ? (uint64_t)set->f[set->nf - 1].cap * 2 : DREC_FIRST;
		uint32_t nblk = (uint32_t)((cap * DREC_BITS + 511) / 512);
		size_t bytes = (size_t)nblk * BLOCK_WORDS * sizeof(uint64_t);
		uint64_t *w = NULL;

		if (set->nf == set->capf) {
			size_t nc = set->capf ? 2 * set->capf : 4;
			struct filt *nf = realloc(set->f, nc * sizeof(*nf));

			if (!nf) {
				set_drop(r, set);
				return;
			}
			set->f = nf;
			set->capf = nc;
		}
		if (cap > UINT32_MAX || r->bud->used + bytes > r->bud->limit ||
		    !(w = calloc(nblk, BLOCK_WORDS * sizeof(uint64_t)))) {
			set_drop(r, set); /* over the budget: this bucket is looked up in full */
			return;
		}
		set->f[set->nf++] = (struct filt){w, nblk, (uint32_t)cap, 0};
		r->bytes += bytes;
		r->bud->used += bytes;
	}
	f = &set->f[set->nf - 1];
	filt_put(f, h);
}

void drec_seal(struct drec_set *set, uint32_t c1, uint32_t k1)
{
	if (set && takes_ids(set)) {
		set->c = c1;
		set->k = k1;
	}
}

bool drec_seeding(const struct drec_set *set)
{
	return set && set->seeding;
}

/*
 * The set a seed of bucket `name` (starting at second `start`) would go into:
 * its own, or a free one, or the older of the two when it began before this
 * bucket. NULL: none (both sets hold buckets at least as new).
 */
static struct drec_set *seed_slot(struct drec_stream *st, const char *name, int64_t start)
{
	struct drec_set *set = set_find(st, name), *old;

	if (set)
		return set;
	for (int k = 0; k < 2; k++)
		if (!st->set[k].name[0])
			return &st->set[k];
	old = st->set[0].start <= st->set[1].start ? &st->set[0] : &st->set[1];
	return old->start < start ? old : NULL;
}

bool drec_seed_range(struct drec *r, const char *stream, size_t slen, const char *name,
                     int64_t start, uint32_t k, uint32_t c, uint32_t chunk, uint32_t *from,
                     uint32_t *to)
{
	struct drec_stream *st;
	struct drec_set *set;
	uint64_t end;

	if (!r || chunk == 0 || k == 0 || strlen(name) >= sizeof(set->name))
		return false;
	st = stream_find(r, stream, slen);
	if (st && (set = set_find(st, name))) {
		/* Recorded, dropped (not read again while it lasts), or someone else has written. */
		if (!set->seeding || set->c != c || set->k != k)
			return false;
		*from = set->next;
		end = (uint64_t)set->next + chunk;
		*to = end < set->k0 ? (uint32_t)end : set->k0;
		return *from < *to;
	}
	/* A new seed: only in a set it may take, and when the budget has room for about c ids. */
	if (st && !seed_slot(st, name, start))
		return false;
	if (r->bud->used + (uint64_t)c * DREC_BITS / 8 + 4096 > r->bud->limit)
		return false;
	*from = 0;
	*to = k < chunk ? k : chunk;
	return true;
}

struct drec_set *drec_seed(struct drec *r, const char *stream, size_t slen, const char *name,
                           int64_t start, uint32_t k, uint32_t c, uint32_t from)
{
	struct drec_stream *st;
	struct drec_set *set;

	if (!r || r->bud->limit == 0 || strlen(name) >= sizeof(set->name))
		return NULL;
	if (from > 0) {
		st = stream_find(r, stream, slen);
		set = st ? set_find(st, name) : NULL;
		if (!set)
			return NULL;
		if (set->seeding && set->c == c && set->k == k && set->next == from)
			return set;
		set_drop(r, set); /* another writer came between the reads: start no more */
		return NULL;
	}
	if (!(st = stream_slot(r, stream, slen)) || !(set = seed_slot(st, name, start)))
		return NULL;
	if (set->name[0] && strcmp(set->name, name) == 0 && (set->live || !set->seeding))
		return NULL; /* recorded meanwhile, or dropped: not read again */
	set_free(r, set);
	memcpy(set->name, name, strlen(name) + 1);
	set->start = start;
	set->c = c;
	set->k = set->k0 = k;
	set->next = 0;
	set->seeding = true;
	return set;
}

void drec_seed_done(struct drec_set *set, uint32_t to)
{
	if (!set || !set->seeding)
		return;
	set->next = to;
	if (to >= set->k0) {
		set->seeding = false;
		set->live = true;
	}
}
