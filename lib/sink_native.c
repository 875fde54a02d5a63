/*
 * sink_native.c - --publish native: a batch written without Lua.
 *
 * The function (sink_script.c) decides inside Redis which events of a batch
 * are replays (the watermark) and duplicates (the dedup buckets), and
 * writes the rest. Here the relay makes the same decisions itself, on the
 * same keys, in the same layout, so either path can follow the other on a
 * stream at any time:
 *
 *   read 1   UNWATCH; WATCH stream dead-letter watermark [legacy watermark]
 *            dedup-base;
 *            GET watermark [GET legacy watermark]; TYPE stream;
 *            and with a dedup window: TIME; HGETALL dedup-base (the index)
 *   read 2   (dedup window, events that are not replays) HMGET of each
 *            shard the batch's ids fall in, per live bucket; HGETALL of
 *            each shard of the current bucket that splits; EXISTS of the
 *            old layout's keys while it may still hold ids
 *   write    MULTI; XADD per new event (its field/value bytes as the
 *            function call holds them); HDEL/HSET/EXPIREAT of the shards;
 *            HSET (and HDEL of buckets out of the window) of the index;
 *            SET watermark; EXEC
 *
 * WATCH makes the write all or nothing against any other writer of the
 * stream, its watermark or its index (the function writes the index
 * whenever it adds an id, and so does this path): EXEC answers nil and
 * the batch is read again (NATIVE_MAX_TRIES times, then it goes through the
 * function, which needs no WATCH). Consumers' XREADGROUP, XACK and
 * XAUTOCLAIM do not touch a watched key.
 *
 * The batch itself stays what the ring holds: the function call's bytes
 * (sink_queue.c). This file reads its arguments from there, and a batch
 * it does not take (a dead letter, republish, a value held by pointer, an
 * ASK redirect, a stream key of another type, retries used up) is sent as
 * that call. So the result per event is the function's (0 replay,
 * 1 duplicate, entry id), counted by the same code.
 *
 * The dedup layout (sink_script.c has the whole story): bucket b of span
 * S = 2W holds K hashes "<base>:<S>:<b>:<j>" (field: the dedup field,
 * value: seconds since the bucket began), an id in hash j = h mod m, or
 * h mod 2m when that is below x = K - m (m: the largest power of two up to
 * K; h: the field's first three bytes, bits read first to last). Every id
 * always sits where the recorded K says, so growing K to K' moves exactly
 * the ids of the hashes split on the way, each to its place under K': those
 * hashes are read whole in read 2, and the rest are never touched.
 *
 * Groups: the batches queued next on one connection, as long as each is the
 * next call for a stream in the group (a unit of consecutive calls: each
 * expects the watermark where the one before leaves it, and is decided against
 * the state that one leaves) or a new stream, in a cluster of one hash slot,
 * up to NATIVE_GROUP_BYTES of calls: one round trip for the reads and one for
 * the write, whatever the number of streams. Calls that queue while read 1 is
 * on its way and continue a unit of the group join it when read 1 answers
 * (take_calls): their keys are the unit's, watched and read already. The ring keeps every call's
 * bytes: what it sends is made from them each round, and each call's results
 * are counted as its own.
 *
 * Reading ahead: when a group's EXEC is staged and the next calls queued on
 * the connection are the native path's, the next group is formed from them
 * and its read 1 is staged right behind that EXEC (and its hand-offs). Redis
 * runs those reads after the write, so they see what it wrote, and answers
 * them as soon as it is done: the round trip between one group's write and
 * the next group's reads is gone. When the EXEC succeeds, the group read
 * ahead takes its place. When it does not (nil: a watched key changed; an
 * abort; ASK), that group's read may have seen the state before a write it
 * depends on: its replies are dropped as they come (discard), and it is read
 * again once the group before it is done. Calls that are not the native
 * path's are never staged ahead: nothing but reads goes behind an EXEC whose
 * outcome is not known.
 *
 * Predicted lookups (--native-predict, the default): read 2 is made from read
 * 1's answers (which events are replays, the index's buckets, their K and
 * count, TIME, "legacy"), and on a stream nobody else writes those answers are
 * what this connection's own last write left. So, per stream (struct pred, the
 * NATIVE_PREDICT streams used last), the connection remembers that state as
 * batch_write stages it, and read 1 of the stream's next unit carries read 2
 * made from it (predict()), unless the group is read ahead: that group forms
 * from the calls that queued while the group before it was read, and when that
 * takes one round trip instead of two it holds half as many events, each
 * paying more of the group's reads and write (tests/bench/RESULTS.md, "Issue
 * 24: one round trip less, predicted"). When read 1 has answered, read 2 is
 * made from the answers as always and compared with what went
 * (read2_or_predicted()): the same commands byte for byte, the same replies
 * expected, the same lookups of the same buckets. Then the answers that came
 * are read 2's and the write goes at once: both reads took one round trip.
 * Else they are dropped and read 2 is sent. Nothing is taken from the
 * prediction but commands that equal read 2's; they run after the WATCH, as
 * read 2 does, so a change to the keys after them fails the EXEC alike. A
 * unit read with a prediction takes no late calls (the answers are per event);
 * an EXEC answered nil forgets its streams' predictions.
 *
 * The id record (--dedup-record, dedup_record.h): per stream and live bucket,
 * filters of the ids this connection's EXECs added, from the write that made
 * the bucket on, with the index's count after the last of them. read 2 leaves
 * out the lookup of an id the filters of a bucket say is not there while read
 * 1's count for that bucket is the recorded one (a lookup left out is one that
 * would have answered nil: batch_write's decisions are the same). No id
 * leaves a live bucket (the function gives a renewed id whose entry the stream
 * key refused its old time back, rather than taking it out), so any other
 * writer's id changes the count, and any other writer's split K, and the
 * bucket's record is not used again. The record is updated only when EXEC
 * succeeded (exec_done, record_write), so a nil EXEC leaves it as it was, and
 * it is forgotten with the connection. A live bucket the connection did not
 * make is read into the record instead (seed_reads: --dedup-record-seed hashes
 * per unit that looks ids up, HKEYS in read 2, taken in when the EXEC
 * succeeded, with the ids its own write moved between hashes meanwhile); it is
 * used once every hash is read (dedup_record.h, "Seeding", says why that is
 * every id).
 *
 * One owner: struct native (one per connection, n->nat) holds the groups on
 * that connection, the one in flight and the one read ahead, the predictions
 * and the id record (struct drec); each struct group holds its batches, the
 * replies it still expects, what they said, and the bytes to stage next (and
 * read 1's round while read 2 is compared with its prediction). All of it is
 * reset when the connection closes (the ring sends every call again, a new
 * group starts from read 1, and no stream has a prediction or a record).
 */
#include "sink_redis.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedup_record.h"
#include "sink_int.h"

#define LOAD 24            /* ids per hash before a split (the function's LOAD) */
#define MAX_K 1048576      /* most hashes in a bucket (the function's cap) */
#define NATIVE_MAX_TRIES 8 /* EXEC answered nil this often: the batch goes through the function */
/*
 * Hashes a group reads into the id record (seed_reads): one per event of the
 * group, at least SEED_MIN, at most --dedup-record-seed. A hash of 24 ids
 * costs Redis about what an event does, so the reads at most double a
 * group's time: at a steady rate a start adds a fraction of a ms to the
 * first groups' latency instead of tens of ms to one, and a backlog's large
 * groups still read --dedup-record-seed each.
 */
#define SEED_MIN 16
/*
 * A group's calls, at most (about 2,800 events of the bench's size). More ids
 * of one group then share a dedup hash, so Redis runs fewer HMGETs and HSETs
 * per id in a backlog; one EXEC of that size keeps Redis busy for some 30 ms.
 */
#define NATIVE_GROUP_BYTES (1024 * 1024)

enum phase { NAT_IDLE, NAT_READ1, NAT_READ2, NAT_EXEC };

/* What one expected reply is. */
enum want_kind {
	W_IGNORE, /* UNWATCH, WATCH, MULTI: +OK; errors still count */
	W_WM,
	W_LEGWM,
	W_TYPE,
	W_TIME,
	W_INDEX,
	W_LOOKUP, /* HMGET: a = first pair in the batch's pairs of its group */
	W_SOURCE, /* HGETALL of a splitting hash: a = hash number */
	W_EXISTS, /* a = event */
	W_SEED,   /* HKEYS of a hash read into the id record: a = bucket */
	W_QUEUED, /* a command inside MULTI */
	W_EXEC,
};

struct want {
	uint8_t kind;
	uint32_t batch; /* index in the group */
	uint32_t a;
};

/* Where the function call's arguments are (offsets from the command's start). */
enum {
	A_STREAM = 3,
	A_WM,
	A_LEGWM,
	A_DL,
	A_BASE,
	A_TTL,
	A_MAXLEN,
	A_OWNER,
	A_EXPECT,
	A_SLOT,
	A_PREFIX,
	A_HINT,
	A_FIRST_EVENT
};

struct span {
	uint32_t off, len;
};

struct nev {
	struct span pos, f, pairs;
	uint32_t nfields;
	uint32_t h;   /* shard hash of the dedup field */
	uint64_t rh;  /* its hash in the id record (dedup_record.h) */
	uint16_t m;   /* the member (function call) it is in */
	int8_t res;   /* -1 not yet, 0 replay, 1 duplicate, 3 written (XADD) */
	bool cand;    /* not a replay: looked up */
	bool fresh;   /* a new id in the current bucket */
	bool renew;   /* an id of the current bucket older than the window: its time renewed */
	bool old_hit; /* the old layout has it */
};

struct bucket {
	char name[48]; /* index field: "<S>:<b>" (or "<b>", written before issue 21) */
	int64_t b, sp, age;
	uint32_t k, c, made;
	bool old, v1;
	uint32_t seed_from, seed_to; /* its hashes read 2 reads into the id record */
	bool recorded;               /* read 2 uses its id record (nothing to read into it) */
};

/* An id of a splitting hash, as HGETALL gave it. */
struct srcid {
	uint32_t hash;                       /* the hash it was read from */
	uint32_t f_off, f_len, v_off, v_len; /* in the batch's srcbytes */
};

/* An id read 2 read for the id record (W_SEED): its hash there, and its bucket. */
struct seedid {
	uint64_t h;
	uint32_t bk;
};

/* A lookup: event ev in hash j of bucket bk. */
struct pair {
	uint32_t j, ev, bk;
};

/* A write to a hash of the current bucket. */
struct op {
	uint32_t j;
	uint8_t del;
	uint32_t order;
	const char *f;
	size_t flen;
	const char *v;
	size_t vlen;
};

/* One function call of a unit: its events are ev[first, first + n). */
struct member {
	uint64_t seq;
	size_t first, n;
	struct span expect; /* in its own bytes */
	uint64_t hint;
	char last[26]; /* its last event's position */
};

/*
 * One unit of the group: the consecutive function calls for one stream
 * (members), read and decided here as one: the second call's events are
 * decided against the state the first call's leave, as the function would
 * have in two calls. Its keys are the first member's arguments.
 */
struct nbatch {
	uint64_t seq; /* the first member's */
	uint32_t idx; /* in the group */
	struct member *mem;
	size_t nmem, capmem;
	bool to_function; /* read 1 found it is the function's to write */
	struct span arg[A_FIRST_EVENT];
	struct nev *ev;
	size_t nev, capev;

	/* read 1 */
	char wm[26];
	bool wm_found;
	char foreign[200];
	bool other_type;
	int64_t now, win;
	int64_t legacy; /* -1 no "legacy" field */
	struct bucket *bk;
	size_t nbk, capbk;
	int cur; /* index in bk of the current bucket, -1 none */
	int prevb;
	struct buf stale; /* index fields out of the window, RESP bulks */
	size_t nstale;

	/* read 2 */
	struct pair *pairs;
	size_t npairs, cappairs;
	int64_t *val; /* value per (bucket, event): val[bk * nev + ev], -1 none */
	size_t capval;
	uint32_t k0, kmax;
	struct srcid *src;
	size_t nsrc, capsrc;
	struct buf srcbytes;

	/*
	 * Read 2 as predicted, sent with read 1 (spec): where its bytes and wants
	 * are in read 1's round, how many buckets it assumed, and, once read 1 has
	 * answered and read 2 is made from the answers, what it asked and was told
	 * (swapped with pairs, val, src and srcbytes to compare and keep).
	 */
	bool spec;
	size_t sb_off, sb_len, sw_first, sw_n, snbk;
	struct pair *spairs;
	size_t nspairs, capspairs;
	int64_t *sval;
	size_t capsval;
	struct srcid *ssrc;
	size_t nssrc, capssrc;
	struct buf ssrcbytes;

	/* write */
	size_t nxadd;
	size_t exec_first; /* its first XADD's place in EXEC's reply */

	/* the id record: lookups read 2 left out, and what the write does to the current bucket */
	size_t nskip;
	struct seedid *seed; /* ids read 2 read into it (W_SEED) */
	size_t nseed, capseed;
	bool seed_held; /* a prediction would have read some: it is not made */
	bool rec_write, rec_created;
	uint32_t rec_c0, rec_c1, rec_k0, rec_k1;
	int64_t rec_start;
	char rec_name[48];
};

/*
 * The group in flight on one connection: consecutive batches of distinct
 * streams (of one hash slot in a cluster), read and written together.
 */
struct group {
	enum phase phase;
	int tries;
	bool due;          /* cmd (then the hand-offs) is to be staged */
	bool unwatch_only; /* cmd is the UNWATCH before hand-offs only */
	struct buf cmd;
	uint64_t *handoff; /* seqs to send as function calls after cmd */
	size_t nhandoff, caphandoff;
	struct want *want;
	size_t nwant, capwant, next; /* next: the want the coming reply answers */
	size_t nqueued;              /* commands queued inside MULTI so far */
	bool failed;
	uint32_t err_batch;
	char err[512];
	bool ask;
	struct nbatch *b;
	size_t nb, capb;
	size_t bytes; /* its calls' bytes (at most NATIVE_GROUP_BYTES) */
	struct op *ops;
	size_t nops, capops;
	uint32_t *seen; /* batch_write's table of the ids a unit writes (power-of-two size) */
	size_t capseen;
	redisReply *res, **resp; /* exec_done's per-event results of a unit */
	size_t capres, capresp;
	bool specs;         /* read 1's round carries a predicted read 2 */
	bool predicting;    /* batch_read2 is making a prediction */
	uint32_t seed_left; /* hashes read 2 may still read into the id record (seed_reads) */
	struct buf spec;    /* read 1's round, kept to compare read 2 with */
	struct want *swant; /* read 1's round's wants, kept likewise */
	size_t capswant;
	struct native *nt; /* the connection's (set once it is made), for its predictions */
};

/*
 * What a stream's keys hold after the last write this connection staged for
 * it, as read 1 would find them: the watermark, the index's buckets (the
 * current one with the write's record), "legacy", and the TIME it was decided
 * at. A guess, never trusted: only read 2's bytes made from it are used, and
 * only when read 1's answers make the same bytes.
 */
struct pred {
	char *stream; /* its key (slen 0: a free slot) */
	size_t slen;
	uint64_t used;
	char wm[26];
	int64_t legacy, now, win;
	struct bucket *bk;
	size_t nbk, capbk;
	int cur, prevb;
};

#define NATIVE_PREDICT 32 /* streams remembered per connection (least recently used goes) */

/* The groups on one connection (the file's header says how they take turns). */
struct native {
	struct group grp[2];
	struct group *cur;   /* the group whose replies come first */
	struct group *ahead; /* NULL, or the group formed from the calls after cur's */
	bool ahead_sent;     /* ahead's read 1 is staged behind cur's EXEC */
	size_t discard;      /* replies still to come of a read ahead that was voided */
	struct pred pred[NATIVE_PREDICT];
	uint64_t clock;   /* for pred[].used */
	struct drec *rec; /* the ids this connection wrote (NULL: --dedup-record 0) */
};

static bool grow(void **p, size_t *cap, size_t need, size_t item)
{
	size_t n = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return true;
	while (n < need)
		n *= 2;
	if (!(q = realloc(*p, n * item)))
		return false;
	memset((char *)q + *cap * item, 0, (n - *cap) * item);
	*p = q;
	*cap = n;
	return true;
}

bool sink_native_on(const struct sink_redis *s)
{
	return s->cf->publish && strcmp(s->cf->publish, "native") == 0;
}

static void batch_free(struct nbatch *t)
{
	free(t->mem);
	free(t->ev);
	free(t->bk);
	free(t->pairs);
	free(t->val);
	free(t->src);
	free(t->spairs);
	free(t->sval);
	free(t->ssrc);
	free(t->seed);
	buf_finish(&t->stale);
	buf_finish(&t->srcbytes);
	buf_finish(&t->ssrcbytes);
}

static void group_free(struct group *g)
{
	for (size_t i = 0; i < g->capb; i++)
		batch_free(&g->b[i]);
	free(g->b);
	buf_finish(&g->cmd);
	free(g->handoff);
	free(g->want);
	free(g->ops);
	free(g->seen);
	free(g->res);
	free(g->resp);
	buf_finish(&g->spec);
	free(g->swant);
}

void sink_native_free(struct node *n)
{
	struct native *nt = n->nat;

	if (!nt)
		return;
	group_free(&nt->grp[0]);
	group_free(&nt->grp[1]);
	for (size_t i = 0; i < NATIVE_PREDICT; i++) {
		free(nt->pred[i].stream);
		free(nt->pred[i].bk);
	}
	drec_free(nt->rec);
	free(nt);
	n->nat = NULL;
}

static void group_reset(struct group *g)
{
	g->phase = NAT_IDLE;
	g->due = g->unwatch_only = false;
	g->nwant = g->next = 0;
	g->nb = g->nhandoff = 0;
}

void sink_native_reset(struct node *n)
{
	struct native *nt = n->nat;

	if (nt) {
		group_reset(&nt->grp[0]);
		group_reset(&nt->grp[1]);
		nt->ahead = NULL;
		nt->ahead_sent = false;
		nt->discard = 0;
		for (size_t i = 0; i < NATIVE_PREDICT; i++)
			nt->pred[i].slen = 0; /* another server, maybe: predict from its answers */
		drec_clear(nt->rec);      /* likewise: its buckets are not known to hold only these ids */
	}
}

bool sink_native_due(const struct node *n)
{
	return n->nat && n->nat->cur->due;
}

bool sink_native_blocks(const struct node *n)
{
	return n->nat && n->nat->cur->phase != NAT_IDLE;
}

/* ---- the batch's arguments ---- */

static const char *ent_bytes(struct sink_redis *s, const struct sq_ent *e)
{
	return sq_bytes(&s->q, e);
}

static const char *at(struct sink_redis *s, const struct sq_ent *e, struct span sp)
{
	return ent_bytes(s, e) + sp.off;
}

static bool span_is(struct sink_redis *s, const struct sq_ent *e, struct span sp, const char *lit)
{
	return sp.len == strlen(lit) && memcmp(at(s, e, sp), lit, sp.len) == 0;
}

static int64_t span_int(struct sink_redis *s, const struct sq_ent *e, struct span sp)
{
	const char *p = at(s, e, sp);
	int64_t v = 0;

	for (uint32_t i = 0; i < sp.len && p[i] >= '0' && p[i] <= '9'; i++)
		v = v * 10 + (p[i] - '0');
	return v;
}

/* One bulk string at *off of the command's bytes [0, len). */
static bool next_bulk(const char *p, size_t len, size_t *off, struct span *out)
{
	size_t o = *off, l = 0;

	if (o >= len || p[o] != '$')
		return false;
	for (o++; o < len && p[o] >= '0' && p[o] <= '9'; o++)
		l = l * 10 + (size_t)(p[o] - '0');
	if (o + 2 > len || p[o] != '\r')
		return false;
	o += 2;
	if (o + l + 2 > len || l > UINT32_MAX)
		return false;
	out->off = (uint32_t)o;
	out->len = (uint32_t)l;
	*off = o + l + 2;
	return true;
}

/* The shard hash of a dedup field (the function's h). */
static uint32_t field_hash(const unsigned char *f, size_t len, uint32_t hash_of_short)
{
	static unsigned char rev[256];
	static bool made;

	if (!made) {
		for (unsigned x = 0; x < 256; x++) {
			unsigned r = 0, v = x;

			for (int i = 0; i < 8; i++, v >>= 1)
				r = r * 2 + (v & 1);
			rev[x] = (unsigned char)r;
		}
		made = true;
	}
	if (len < 3)
		return hash_of_short;
	return rev[f[0]] + rev[f[1]] * 256u + rev[f[2]] * 65536u;
}

static uint32_t pow2floor(uint32_t k)
{
	uint32_t m = 1;

	while (m * 2 <= k)
		m *= 2;
	return m;
}

/* The hash an id of hash value h sits in when a bucket has k hashes. */
static uint32_t shard_of(uint32_t h, uint32_t k)
{
	uint32_t m = pow2floor(k), j = h % m;

	return j < k - m ? h % (2 * m) : j;
}

/* The bytes the event's own function call holds its spans in. */
static const char *vat(struct sink_redis *s, const struct nbatch *t, const struct nev *v,
                       struct span sp)
{
	return ent_bytes(s, sq_ent(&s->q, t->mem[v->m].seq)) + sp.off;
}

/* e's arguments (before the events) into arg; false when it is not the call this file knows. */
static bool parse_args(struct sink_redis *s, const struct sq_ent *e, struct span *arg, size_t *off)
{
	const char *p = ent_bytes(s, e), *nl;
	size_t len = e->len;

	if (len < 4 || p[0] != '*' || !(nl = memchr(p, '\n', len)))
		return false;
	*off = (size_t)(nl - p) + 1;
	for (int i = 0; i < A_FIRST_EVENT; i++)
		if (!next_bulk(p, len, off, &arg[i]))
			return false;
	return true;
}

/* Parse e's function call as t's next member: its events appended to t's. */
static bool parse_batch(struct sink_redis *s, struct nbatch *t, const struct sq_ent *e)
{
	const char *p = ent_bytes(s, e);
	size_t len = e->len, off, n0 = t->nmem ? t->nev : 0;
	struct span sp, arg[A_FIRST_EVENT];
	struct member *mb;

	if (!parse_args(s, e, arg, &off) || t->nmem >= UINT16_MAX ||
	    !grow((void **)&t->mem, &t->capmem, t->nmem + 1, sizeof(*t->mem)))
		return false;
	if (t->nmem == 0) {
		memcpy(t->arg, arg, sizeof(arg));
		t->nev = 0;
	}
	mb = &t->mem[t->nmem];
	mb->seq = e->seq;
	mb->first = n0;
	mb->expect = arg[A_EXPECT];
	mb->hint = (uint64_t)span_int(s, e, arg[A_HINT]);
	mb->last[0] = '\0';
	while (off < len) {
		struct nev *v;
		uint32_t nf;

		if (!grow((void **)&t->ev, &t->capev, t->nev + 1, sizeof(*t->ev)))
			return false;
		v = &t->ev[t->nev];
		memset(v, 0, sizeof(*v));
		v->m = (uint16_t)t->nmem;
		if (!next_bulk(p, len, &off, &v->pos) || !next_bulk(p, len, &off, &v->f) ||
		    !next_bulk(p, len, &off, &sp))
			return false;
		nf = (uint32_t)span_int(s, e, sp);
		v->nfields = nf;
		v->pairs.off = (uint32_t)off;
		for (uint32_t i = 0; i < 2 * nf; i++)
			if (!next_bulk(p, len, &off, &sp))
				return false;
		v->pairs.len = (uint32_t)(off - v->pairs.off);
		v->h = field_hash((const unsigned char *)p + v->f.off, v->f.len, v->f.len);
		v->rh = drec_hash(p + v->f.off, v->f.len);
		v->res = -1;
		if (v->pos.len == 25) {
			memcpy(mb->last, p + v->pos.off, 25);
			mb->last[25] = '\0';
		}
		t->nev++;
	}
	mb->n = t->nev - n0;
	if (mb->n != e->nevents) {
		t->nev = n0;
		return false;
	}
	t->nmem++;
	return true;
}

/* ---- staging ---- */

static void bulk_span(struct buf *b, struct sink_redis *s, const struct sq_ent *e, struct span sp)
{
	resp_bulk(b, at(s, e, sp), sp.len);
}

static void bulk_i64(struct buf *b, int64_t v)
{
	char tmp[24], *d = u64_to_dec(tmp + sizeof(tmp), (uint64_t)(v < 0 ? 0 : v));

	resp_bulk(b, d, (size_t)(tmp + sizeof(tmp) - d));
}

/* "<base>:<bucket>:<j>" (no printf: one per hash the batch touches) */
static void bulk_shard(struct buf *b, struct sink_redis *s, const struct sq_ent *e,
                       const struct nbatch *t, const struct bucket *bk, uint32_t j)
{
	char num[16], *d = u64_to_dec(num + sizeof(num), j);
	size_t nl = strlen(bk->name), dl = (size_t)(num + sizeof(num) - d);
	struct span base = t->arg[A_BASE];

	buf_putc(b, '$');
	buf_put_u64(b, base.len + 2 + nl + dl);
	buf_append(b, "\r\n", 2);
	buf_append(b, at(s, e, base), base.len);
	buf_putc(b, ':');
	buf_append(b, bk->name, nl);
	buf_putc(b, ':');
	buf_append(b, d, dl);
	buf_append(b, "\r\n", 2);
}

static bool want(struct group *g, enum want_kind k, const struct nbatch *t, uint32_t a)
{
	if (!grow((void **)&g->want, &g->capwant, g->nwant + 1, sizeof(*g->want)))
		return false;
	g->want[g->nwant++] = (struct want){(uint8_t)k, t ? t->idx : 0, a};
	if (k == W_QUEUED)
		g->nqueued++;
	return true;
}

static bool legwm_differs(struct sink_redis *s, const struct sq_ent *e, const struct nbatch *t)
{
	struct span a = t->arg[A_WM], b = t->arg[A_LEGWM];

	return a.len != b.len || memcmp(at(s, e, a), at(s, e, b), a.len) != 0;
}

static int64_t window(struct sink_redis *s, const struct sq_ent *e, const struct nbatch *t)
{
	return span_int(s, e, t->arg[A_TTL]);
}

/* ---- replies ---- */

static bool str_eq(const redisReply *r, const char *lit)
{
	return (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
	       r->len == strlen(lit) && memcmp(r->str, lit, r->len) == 0;
}

static int64_t reply_int(const redisReply *r, bool *ok)
{
	int64_t v = 0;

	*ok = false;
	if (r->type == REDIS_REPLY_INTEGER) {
		*ok = true;
		return r->integer;
	}
	if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 18)
		return 0;
	for (size_t i = 0; i < r->len; i++) {
		if (r->str[i] < '0' || r->str[i] > '9')
			return 0;
		v = v * 10 + (r->str[i] - '0');
	}
	*ok = true;
	return v;
}

/* Digits of s[0..n) as a number, -1 when s is not all digits (or empty). */
static int64_t digits(const char *s, size_t n)
{
	int64_t v = 0;

	if (n == 0 || n > 18)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* The watermark's value "<position> <owner>". */
static void take_wm(struct sink_redis *s, struct nbatch *t, const redisReply *r)
{
	if (r->type != REDIS_REPLY_STRING || t->wm_found)
		return;
	t->wm_found = true;
	snprintf(t->wm, sizeof(t->wm), "%.*s", (int)(r->len < 25 ? r->len : 25), r->str);
	if (r->len > 26 &&
	    (r->len - 26 != strlen(s->q.owner) || memcmp(r->str + 26, s->q.owner, r->len - 26) != 0))
		snprintf(t->foreign, sizeof(t->foreign), "%.*s", (int)(r->len - 26), r->str + 26);
}

static void take_index(struct nbatch *t, const redisReply *r, int64_t win)
{
	int64_t span = 2 * win, cur = t->now / span;

	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
		const redisReply *f = r->element[i], *v = r->element[i + 1];
		struct bucket bk;
		const char *colon;
		int64_t nums[4] = {-1, -1, -1, -1};
		size_t nn = 0, st = 0;

		if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		if (str_eq(f, "legacy")) {
			t->legacy = digits(v->str, v->len);
			if (t->legacy < 0)
				t->legacy = 0;
			continue;
		}
		memset(&bk, 0, sizeof(bk));
		if (f->len >= sizeof(bk.name))
			continue;
		memcpy(bk.name, f->str, f->len);
		colon = memchr(f->str, ':', f->len);
		for (size_t j = 0; j <= v->len && nn < 4; j++)
			if (j == v->len || v->str[j] == ' ') {
				nums[nn++] = digits(v->str + st, j - st);
				st = j + 1;
			}
		if (nn < 3 || nums[0] < 1 || nums[1] < 0 || nums[2] < 0)
			continue; /* not a record the function wrote */
		bk.k = (uint32_t)nums[0];
		bk.c = (uint32_t)nums[1];
		bk.made = (uint32_t)nums[2];
		if (colon) {
			bk.sp = digits(f->str, (size_t)(colon - f->str));
			bk.b = digits(colon + 1, f->len - (size_t)(colon - f->str) - 1);
		} else {
			bk.v1 = true;
			bk.b = digits(f->str, f->len);
			bk.sp = nn == 4 && nums[3] > 0 ? nums[3] : win;
		}
		if (bk.b < 0 || bk.sp <= 0)
			continue;
		bk.old = bk.b * bk.sp < t->now - win;
		bk.age = t->now - bk.b * bk.sp;
		if (!bk.v1 && bk.sp == span && bk.b == cur) {
			t->cur = (int)t->nbk;
		} else if ((bk.b + 1) * bk.sp <= t->now - win) {
			resp_bulk(&t->stale, f->str, f->len);
			t->nstale++;
			continue;
		} else if (!bk.v1 && bk.b == cur - 1 && bk.sp == span) {
			t->prevb = (int)t->nbk;
		}
		if (grow((void **)&t->bk, &t->capbk, t->nbk + 1, sizeof(*t->bk)))
			t->bk[t->nbk++] = bk;
	}
}

/* The field a bucket holds an event's id under, and its hash there. */
static void bucket_field(struct sink_redis *s, const struct nbatch *t, const struct bucket *bk,
                         const struct nev *v, const char **f, size_t *flen, uint32_t *h)
{
	*f = vat(s, t, v, v->f);
	*flen = v->f.len;
	*h = v->h;
	if (bk->v1) {
		*f += v->f.len >= 3 ? 3 : v->f.len;
		*flen -= v->f.len >= 3 ? 3 : v->f.len;
		*h = field_hash((const unsigned char *)*f, *flen, (uint32_t)*flen);
	}
}

static int cmp_pair(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	if (x->bk != y->bk)
		return x->bk < y->bk ? -1 : 1;
	if (x->j != y->j)
		return x->j < y->j ? -1 : 1;
	return x->ev < y->ev ? -1 : x->ev > y->ev;
}

/* The old layout's key of an id: the prefix, then the id as text (the function's idtext). */
static void bulk_old_key(struct buf *b, struct sink_redis *s, const struct sq_ent *e,
                         const struct nbatch *t, const struct nev *v)
{
	const unsigned char *g = (const unsigned char *)vat(s, t, v, v->f) + 3;
	size_t glen = v->f.len >= 3 ? v->f.len - 3 : 0;
	char text[64];
	size_t tl = 0;
	struct span pre = t->arg[A_PREFIX];

	if (glen == 16) {
		unsigned char u[16];

		memcpy(u, g, 16);
		for (int i = 0; i < 4; i++) {
			unsigned x = u[15 - i], r = 0;

			for (int k = 0; k < 8; k++, x >>= 1)
				r = r * 2 + (x & 1);
			u[i] = (unsigned char)(u[i] ^ r);
		}
		tl =
		    (size_t)snprintf(text, sizeof(text),
		                     "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		                     u[3], u[2], u[1], u[0], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
		                     u[11], u[12], u[13], u[14], u[15]);
		g = (const unsigned char *)text;
		glen = tl;
	} else {
		g += glen >= 4 ? 4 : glen;
		glen = glen >= 4 ? glen - 4 : 0;
		if (glen >= 13 && g[glen - 1] == 0)
			glen--;
	}
	buf_putc(b, '$');
	buf_put_u64(b, pre.len + glen);
	buf_append(b, "\r\n", 2);
	buf_append(b, at(s, e, pre), pre.len);
	buf_append(b, g, glen);
	buf_append(b, "\r\n", 2);
}

/*
 * Until when the old layout (a key per id) may hold ids: the index's "legacy",
 * or for a stream without it, a window from now when the stream has a
 * watermark (it was published before the index existed), else never.
 */
static int64_t legacy_until(const struct nbatch *t)
{
	if (t->legacy >= 0)
		return t->legacy;
	return t->wm_found ? t->now + t->win : 0;
}

/* The number of hashes the current bucket ends with when it holds c ids. */
static uint32_t final_k(uint32_t k1, uint64_t c)
{
	uint64_t need = (c + LOAD - 1) / LOAD;

	return need > k1 ? (uint32_t)(need < UINT32_MAX ? need : UINT32_MAX) : k1;
}

/* The ids to come: the largest any member's call says (each call's estimate is its own). */
static uint64_t hint_of(const struct nbatch *t)
{
	uint64_t h = 0;

	for (size_t i = 0; i < t->nmem; i++)
		if (t->mem[i].hint > h)
			h = t->mem[i].hint;
	return h;
}

static uint32_t clampk(uint64_t n)
{
	uint64_t k = (n + LOAD - 1) / LOAD;

	return k < 1 ? 1 : k > MAX_K ? MAX_K : (uint32_t)k;
}

/* K after the growth a call makes before its inserts (the function's pre-splits). */
static uint32_t grown_k(const struct nbatch *t)
{
	const struct bucket *cb;
	uint64_t to;

	if (t->cur < 0) {
		uint64_t prevc = t->prevb >= 0 ? t->bk[t->prevb].c : 0, hint = hint_of(t);

		return clampk(hint > prevc ? hint : prevc);
	}
	cb = &t->bk[t->cur];
	if (cb->c > 1024)
		return cb->k;
	to = ((uint64_t)cb->c + hint_of(t) + LOAD - 1) / LOAD;
	if (to > MAX_K)
		to = MAX_K;
	if (to > (uint64_t)cb->k + 256)
		to = (uint64_t)cb->k + 256;
	return to > cb->k ? (uint32_t)to : cb->k;
}

/*
 * Read 2's reads of live buckets this connection did not make into its id
 * record (dedup_record.h, "Seeding"): their next hashes, HKEYS, at most
 * seed_budget() in the group whatever its streams (g->seed_left), kept
 * in t->seed until the group's EXEC succeeded. A prediction
 * reads none: the record moves on when the EXEC succeeds, so read 2 made
 * after read 1 answered could ask for other hashes than the prediction did;
 * a unit that would read some is not predicted (t->seed_held).
 */
static uint32_t seed_budget(const struct sink_redis *s, const struct group *g)
{
	uint64_t n = 0, max = (uint64_t)s->cf->dedup_record_seed;

	for (size_t i = 0; i < g->nb; i++)
		n += g->b[i].nev;
	if (n < SEED_MIN)
		n = SEED_MIN;
	return (uint32_t)(n < max ? n : max);
}

static bool seed_reads(struct sink_redis *s, struct group *g, struct nbatch *t, struct sq_ent *e)
{
	struct span st = t->arg[A_STREAM];

	for (size_t bi = 0; g->nt->rec && bi < t->nbk; bi++) {
		struct bucket *bk = &t->bk[bi];
		uint32_t from, to;

		uint32_t chunk = g->predicting ? (uint32_t)s->cf->dedup_record_seed : g->seed_left;

		if (bk->v1 || bk->recorded ||
		    !drec_seed_range(g->nt->rec, at(s, e, st), st.len, bk->name, bk->b * bk->sp, bk->k,
		                     bk->c, chunk, &from, &to))
			continue;
		if (g->predicting) {
			t->seed_held = true;
			return true;
		}
		bk->seed_from = from;
		bk->seed_to = to;
		g->seed_left -= to - from;
		for (uint32_t j = from; j < to; j++) {
			resp_array(&g->cmd, 2);
			resp_str(&g->cmd, "HKEYS");
			bulk_shard(&g->cmd, s, e, t, bk, j);
			if (!want(g, W_SEED, t, (uint32_t)bi))
				return false;
		}
	}
	return true;
}

/*
 * After read 1: the replays are known. Stage read 2 (lookups and the hashes
 * that split), or go straight to the write.
 */
static bool batch_read2(struct sink_redis *s, struct group *g, struct nbatch *t, struct sq_ent *e)
{
	struct buf *b = &g->cmd;
	size_t ncand = 0;
	uint32_t k1;
	char hi[25];

	t->nskip = 0;
	t->nseed = 0;
	for (size_t i = 0; i < t->nbk; i++)
		t->bk[i].seed_from = t->bk[i].seed_to = 0;
	/*
	 * A replay: at or below the watermark read 1 found, or at or below a position
	 * an earlier event of the unit writes (hi: the highest so far). A call
	 * PostgreSQL streamed again after a reconnect can continue the unit of the
	 * call it repeats: its events are compared with what that one writes.
	 */
	if (t->wm_found && t->wm[0])
		memcpy(hi, t->wm, 25);
	else
		hi[0] = '\0';
	for (size_t i = 0; i < t->nev; i++) {
		struct nev *v = &t->ev[i];
		const char *pos = vat(s, t, v, v->pos);

		if (v->pos.len == 25 && hi[0] && memcmp(hi, pos, 25) >= 0) {
			v->res = 0;
		} else {
			v->cand = true;
			ncand++;
			if (v->pos.len == 25)
				memcpy(hi, pos, 25);
		}
	}
	t->npairs = 0;
	t->nsrc = 0;
	buf_reset(&t->srcbytes);
	/* Nothing to look up, and (as the function does on every call) no growth due. */
	if (window(s, e, t) <= 0 || (ncand == 0 && (t->cur < 0 || grown_k(t) <= t->bk[t->cur].k)))
		return true;
	if (!grow((void **)&t->val, &t->capval, (t->nbk ? t->nbk : 1) * t->nev, sizeof(*t->val)))
		return false;
	for (size_t i = 0; i < t->nbk * t->nev; i++)
		t->val[i] = -1;
	for (size_t bi = 0; bi < t->nbk; bi++) {
		struct bucket *bk = &t->bk[bi];
		/*
		 * A bucket whose every id this connection wrote (dedup_record.h): an id
		 * its record cannot hold is not there, and its lookup would answer nil.
		 */
		const struct drec_set *rs = bk->v1 ? NULL
		                                   : drec_get(g->nt->rec, at(s, e, t->arg[A_STREAM]),
		                                              t->arg[A_STREAM].len, bk->name, bk->c);

		bk->recorded = rs != NULL;

		for (size_t i = 0; i < t->nev; i++) {
			const char *f;
			size_t fl;
			uint32_t h;

			if (!t->ev[i].cand)
				continue;
			if (rs && !drec_may_hold(rs, t->ev[i].rh)) {
				t->nskip++;
				continue;
			}
			bucket_field(s, t, bk, &t->ev[i], &f, &fl, &h);
			if (!grow((void **)&t->pairs, &t->cappairs, t->npairs + 1, sizeof(*t->pairs)))
				return false;
			t->pairs[t->npairs++] = (struct pair){shard_of(h, bk->k), (uint32_t)i, (uint32_t)bi};
		}
	}
	if (t->npairs > 1)
		qsort(t->pairs, t->npairs, sizeof(*t->pairs), cmp_pair);
	for (size_t gi = 0; gi < t->npairs;) {
		size_t end = gi;

		while (end < t->npairs && t->pairs[end].bk == t->pairs[gi].bk &&
		       t->pairs[end].j == t->pairs[gi].j)
			end++;
		resp_array(b, 2 + (end - gi));
		resp_str(b, "HMGET");
		bulk_shard(b, s, e, t, &t->bk[t->pairs[gi].bk], t->pairs[gi].j);
		for (size_t i = gi; i < end; i++) {
			const char *f;
			size_t fl;
			uint32_t h;

			bucket_field(s, t, &t->bk[t->pairs[gi].bk], &t->ev[t->pairs[i].ev], &f, &fl, &h);
			resp_bulk(b, f, fl);
		}
		if (!want(g, W_LOOKUP, t, (uint32_t)gi))
			return false;
		gi = end;
	}
	/* The hashes of the current bucket that may split: K grows to at most kmax. */
	k1 = grown_k(t);
	t->k0 = t->cur >= 0 ? t->bk[t->cur].k : k1;
	t->kmax = final_k(k1, (uint64_t)(t->cur >= 0 ? t->bk[t->cur].c : 0) + ncand);
	if (t->cur >= 0) {
		/* Each hash below k0 that a split on the way to kmax takes ids from, once. */
		for (uint32_t k = t->k0; k < t->kmax; k++) {
			uint32_t p = k - pow2floor(k);
			bool seen = false;

			for (uint32_t q = t->k0; q < k && !seen; q++)
				seen = q - pow2floor(q) == p;
			if (p >= t->k0 || seen)
				continue;
			resp_array(b, 2);
			resp_str(b, "HGETALL");
			bulk_shard(b, s, e, t, &t->bk[t->cur], p);
			if (!want(g, W_SOURCE, t, p))
				return false;
		}
	}
	if (legacy_until(t) >= t->now)
		for (size_t i = 0; i < t->nev; i++)
			if (t->ev[i].cand) {
				resp_array(b, 2);
				resp_str(b, "EXISTS");
				bulk_old_key(b, s, e, t, &t->ev[i]);
				if (!want(g, W_EXISTS, t, (uint32_t)i))
					return false;
			}
	return seed_reads(s, g, t, e) && !b->failed;
}

/* ---- read 2 predicted ---- */

static struct pred *pred_find(struct native *nt, const char *key, size_t len)
{
	for (size_t i = 0; i < NATIVE_PREDICT; i++) {
		struct pred *p = &nt->pred[i];

		if (p->slen == len && len > 0 && memcmp(p->stream, key, len) == 0) {
			p->used = ++nt->clock;
			return p;
		}
	}
	return NULL;
}

/* Stream key's prediction, a new one in the slot used least recently when it has none. */
static struct pred *pred_slot(struct native *nt, const char *key, size_t len)
{
	struct pred *p = pred_find(nt, key, len), *old = &nt->pred[0];
	char *copy;

	if (p)
		return p;
	for (size_t i = 1; i < NATIVE_PREDICT; i++)
		if (nt->pred[i].slen == 0 || (old->slen > 0 && nt->pred[i].used < old->used))
			old = &nt->pred[i];
	if (!(copy = realloc(old->stream, len)))
		return NULL;
	memcpy(copy, key, len);
	old->stream = copy;
	old->slen = len;
	old->used = ++nt->clock;
	return old;
}

/*
 * After batch_write decided unit t: what its stream's keys hold once the EXEC
 * is done (cur: the current bucket's record as written, NULL when the index
 * keeps it as read), for the next read 1 of the stream to predict read 2 from.
 */
static void remember(struct sink_redis *s, struct group *g, const struct nbatch *t,
                     const struct sq_ent *e, const char *top, const struct bucket *cur)
{
	struct span st = t->arg[A_STREAM];
	struct pred *p;

	if (!s->cf->native_predict || !(p = pred_slot(g->nt, at(s, e, st), st.len)))
		return;
	if (!grow((void **)&p->bk, &p->capbk, t->nbk + 1, sizeof(*p->bk))) {
		p->slen = 0;
		return;
	}
	if (t->nbk)
		memcpy(p->bk, t->bk, t->nbk * sizeof(*t->bk));
	p->nbk = t->nbk;
	p->cur = t->cur;
	p->prevb = t->prevb;
	if (cur) {
		if (p->cur < 0)
			p->cur = (int)p->nbk++; /* a new bucket: HSET puts it last */
		p->bk[p->cur] = *cur;
	}
	snprintf(p->wm, sizeof(p->wm), "%s", top);
	p->legacy = legacy_until(t); /* what batch_write leaves: "legacy" as read, or as it writes it */
	p->now = t->now;
	p->win = t->win;
}

/* What read 1 fills in, empty (read 2's replies, old_hit among them, stay). */
static void clear_read1(struct nbatch *t)
{
	t->wm[0] = '\0';
	t->wm_found = t->other_type = t->to_function = false;
	t->foreign[0] = '\0';
	t->legacy = -1;
	t->nbk = 0;
	t->cur = t->prevb = -1;
	t->now = 0;
	t->kmax = t->k0 = 0;
	buf_reset(&t->stale);
	t->nstale = 0;
	for (size_t k = 0; k < t->nev; k++) {
		struct nev *v = &t->ev[k];

		v->res = -1;
		v->cand = v->fresh = v->renew = false;
	}
}

/*
 * Behind read 1 of unit t: its read 2 as its stream's prediction makes it,
 * when there is one and it looks anything up (t->spec). The replies fill
 * t's pairs, val, src and old_hit as read 2's would; read1_done keeps them
 * only if read 1's answers make the same read 2.
 */
static bool predict(struct sink_redis *s, struct group *g, struct nbatch *t, struct sq_ent *e)
{
	struct span st = t->arg[A_STREAM];
	const struct pred *p = pred_find(g->nt, at(s, e, st), st.len);
	size_t c0 = g->cmd.len, w0 = g->nwant;

	if (!p || t->win <= 0 || p->win != t->win)
		return true;
	if (!grow((void **)&t->bk, &t->capbk, p->nbk + 1, sizeof(*t->bk)))
		return false;
	memcpy(t->bk, p->bk, p->nbk * sizeof(*p->bk));
	t->nbk = p->nbk;
	t->cur = p->cur;
	t->prevb = p->prevb;
	memcpy(t->wm, p->wm, sizeof(t->wm));
	t->wm_found = true;
	t->legacy = p->legacy;
	t->now = p->now;
	t->seed_held = false;
	g->predicting = true;
	if (!batch_read2(s, g, t, e)) {
		g->predicting = false;
		return false;
	}
	g->predicting = false;
	if (t->seed_held) {
		/* A bucket being read into the id record: read 2 waits for read 1. */
		g->cmd.len = c0;
		g->nwant = w0;
	} else if (g->nwant > w0) {
		t->spec = g->specs = true;
		t->sb_off = c0;
		t->sb_len = g->cmd.len - c0;
		t->sw_first = w0;
		t->sw_n = g->nwant - w0;
		t->snbk = t->nbk;
	}
	clear_read1(t);
	return true;
}

#define SWAP(T, a, b)                                                                              \
	do {                                                                                           \
		T swap_tmp_ = (a);                                                                         \
		(a) = (b);                                                                                 \
		(b) = swap_tmp_;                                                                           \
	} while (0)

/* What the predicted read 2 was told <-> where read 2 made now puts its answers. */
static void swap_answers(struct nbatch *t)
{
	SWAP(int64_t *, t->val, t->sval);
	SWAP(size_t, t->capval, t->capsval);
	SWAP(struct srcid *, t->src, t->ssrc);
	SWAP(size_t, t->nsrc, t->nssrc);
	SWAP(size_t, t->capsrc, t->capssrc);
	SWAP(struct buf, t->srcbytes, t->ssrcbytes);
}

/*
 * Read 2 of unit t, made from read 1's answers. When the predicted one went
 * with read 1 and asked exactly this (the same commands byte for byte, the
 * same replies expected, the same lookups over the same buckets), its answers
 * are read 2's and nothing is staged; else they are dropped and read 2 goes.
 */
static bool read2_or_predicted(struct sink_redis *s, struct group *g, struct nbatch *t,
                               struct sq_ent *e)
{
	size_t c0 = g->cmd.len, w0 = g->nwant;
	bool same;

	if (!t->spec)
		return batch_read2(s, g, t, e);
	t->spec = false;
	swap_answers(t);
	SWAP(struct pair *, t->pairs, t->spairs);
	SWAP(size_t, t->npairs, t->nspairs);
	SWAP(size_t, t->cappairs, t->capspairs);
	if (!batch_read2(s, g, t, e))
		return false;
	same = !g->cmd.failed && t->nbk == t->snbk && g->cmd.len - c0 == t->sb_len &&
	       g->spec.len >= t->sb_off + t->sb_len &&
	       memcmp(g->cmd.data + c0, g->spec.data + t->sb_off, t->sb_len) == 0 &&
	       g->nwant - w0 == t->sw_n && t->npairs == t->nspairs &&
	       (t->npairs == 0 || memcmp(t->pairs, t->spairs, t->npairs * sizeof(*t->pairs)) == 0);
	for (size_t i = 0; same && i < t->sw_n; i++) {
		const struct want *a = &g->want[w0 + i], *b = &g->swant[t->sw_first + i];

		same = a->kind == b->kind && a->batch == b->batch && a->a == b->a;
	}
	if (same) {
		g->cmd.len = c0;
		g->nwant = w0;
		for (size_t i = 0; i < t->nbk; i++)
			t->bk[i].seed_from = t->bk[i].seed_to = 0; /* none: the prediction read none */
		swap_answers(t);
		s->stats.native_predicted++;
	} else {
		for (size_t k = 0; k < t->nev; k++)
			t->ev[k].old_hit = false; /* EXISTS again, if read 2 asks */
		s->stats.predict_missed++;
	}
	return true;
}

static bool add_op(struct group *g, uint32_t j, bool del, const char *f, size_t flen, const char *v,
                   size_t vlen)
{
	if (!grow((void **)&g->ops, &g->capops, g->nops + 1, sizeof(*g->ops)))
		return false;
	g->ops[g->nops] = (struct op){j, del, (uint32_t)g->nops, f, flen, v, vlen};
	g->nops++;
	return true;
}

static int cmp_op(const void *a, const void *b)
{
	const struct op *x = a, *y = b;

	if (x->j != y->j)
		return x->j < y->j ? -1 : 1;
	if (x->del != y->del)
		return x->del > y->del ? -1 : 1; /* HDEL before HSET */
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Same field bytes? */
static bool same_field(struct sink_redis *s, const struct nbatch *t, const struct nev *a,
                       const struct nev *b)
{
	return a->f.len == b->f.len && memcmp(vat(s, t, a, a->f), vat(s, t, b, b->f), a->f.len) == 0;
}

/*
 * Decide every event (read 2's answers are in t), then stage the write:
 * MULTI, the XADDs, the hashes, the index, the watermark, EXEC.
 */
static bool batch_write(struct sink_redis *s, struct group *g, struct nbatch *t, struct sq_ent *e)
{
	struct buf *b = &g->cmd;
	int64_t win = window(s, e, t), span = 2 * win, cur = win > 0 ? t->now / span : 0;
	int64_t into = win > 0 ? t->now - cur * span : 0, late = into > win ? into : -1;
	char top[26];
	uint32_t c0 = t->cur >= 0 ? t->bk[t->cur].c : 0, c = c0, kf = 0, made = 0;
	bool maxlen = !span_is(s, e, t->arg[A_MAXLEN], "0"), newbk = false;
	char off[24];
	int offl = snprintf(off, sizeof(off), "%" PRId64, into);
	struct bucket curb;

	snprintf(top, sizeof(top), "%s", t->wm);
	memset(&curb, 0, sizeof(curb));
	/* The ids this unit writes, by hash: an open table of event numbers + 1, at most half full. */
	{
		size_t cap = 16;

		while (cap < 2 * t->nev + 2)
			cap *= 2;
		if (!grow((void **)&g->seen, &g->capseen, cap, sizeof(*g->seen)))
			return false;
		memset(g->seen, 0, g->capseen * sizeof(*g->seen));
	}
	/* Decide, event by event, as the function does. */
	for (size_t i = 0; i < t->nev; i++) {
		struct nev *v = &t->ev[i];
		bool dup = false;

		if (!v->cand)
			continue;
		if (win > 0) {
			for (size_t bi = 0; bi < t->nbk && !dup; bi++) {
				int64_t x = t->val[bi * t->nev + i];

				if ((int)bi == t->cur || x < 0)
					continue;
				dup = !t->bk[bi].old || t->bk[bi].age - x <= win;
			}
			if (!dup && legacy_until(t) >= t->now && v->old_hit)
				dup = true;
			if (!dup) {
				/* An earlier event of this unit with the same id was written first. */
				size_t j = v->h * 2654435761u & (g->capseen - 1);

				for (; g->seen[j]; j = (j + 1) & (g->capseen - 1))
					if (same_field(s, t, &t->ev[g->seen[j] - 1], v)) {
						dup = true;
						break;
					}
				if (!dup)
					g->seen[j] = (uint32_t)i + 1; /* written below: fresh or renewed */
			}
			if (!dup) {
				int64_t x = t->cur >= 0 ? t->val[(size_t)t->cur * t->nev + i] : -1;

				if (x < 0) {
					v->fresh = true;
					c++;
				} else if (late >= 0 && late - x > win) {
					v->renew = true;
				} else {
					dup = true;
				}
			}
		}
		v->res = dup ? 1 : 3;
		memcpy(top, vat(s, t, v, v->pos), 25);
		top[25] = '\0';
	}

	t->nxadd = 0;
	t->exec_first = g->nqueued;
	t->rec_write = false;
	g->nops = 0;
	for (size_t i = 0; i < t->nev; i++) {
		struct nev *v = &t->ev[i];

		if (v->res != 3)
			continue;
		resp_array(b, 3 + (maxlen ? 3 : 0) + 2 * v->nfields);
		resp_str(b, "XADD");
		bulk_span(b, s, e, t->arg[A_STREAM]);
		if (maxlen) {
			resp_str(b, "MAXLEN");
			resp_str(b, "~");
			bulk_span(b, s, e, t->arg[A_MAXLEN]);
		}
		resp_str(b, "*");
		buf_append(b, vat(s, t, v, v->pairs), v->pairs.len);
		if (!want(g, W_QUEUED, t, (uint32_t)i))
			return false;
		t->nxadd++;
	}
	if (win > 0) {
		bool any = false;

		for (size_t i = 0; i < t->nev; i++)
			any = any || t->ev[i].fresh || t->ev[i].renew;
		/* The function grows an existing current bucket on every call that looks ids up. */
		if (t->cur >= 0 && t->kmax > 0)
			any = true;
		if (any) {
			uint32_t k1 = grown_k(t), exp_from;
			bool inserts = false;

			for (size_t i = 0; i < t->nev; i++)
				inserts = inserts || t->ev[i].fresh || t->ev[i].renew;
			if (t->cur >= 0) {
				curb = t->bk[t->cur];
			} else {
				newbk = true;
				snprintf(curb.name, sizeof(curb.name), "%" PRId64 ":%" PRId64, span, cur);
				curb.k = k1;
			}
			kf = final_k(k1, c);
			made = curb.made;
			exp_from = made; /* hashes from here on get their expiry set when written */
			/*
			 * As the function does before its first insert: hashes from made on
			 * are created (an empty field "" that never moves keeps one alive
			 * when a split takes all its ids) with their expiry, up to 256 a call,
			 * beyond what the previous bucket's count needs only one per 4 ids
			 * already in the bucket; writes to hashes from there on set their
			 * own expiry.
			 */
			if (inserts) {
				uint64_t kp = t->prevb >= 0 ? (t->bk[t->prevb].c + LOAD - 1) / LOAD : 0;
				uint64_t chunk = c0 / 4 > kp ? c0 / 4 : kp;

				if (chunk > (uint64_t)made + 256)
					chunk = (uint64_t)made + 256;
				if (chunk > k1)
					chunk = k1;
				for (uint32_t j = made; j < chunk; j++)
					if (!add_op(g, j, false, "", 0, "", 0))
						return false;
				if (chunk > made)
					made = (uint32_t)chunk;
			}
			/* Ids of the hashes that split move to their place under kf (a hash's ids
			 * are one run of t->src). */
			for (size_t i = 0; t->cur >= 0 && i < t->nsrc;) {
				uint32_t p = t->src[i].hash;
				size_t end = i, moved = 0, all;
				bool split = false;

				while (end < t->nsrc && t->src[end].hash == p)
					end++;
				all = end - i;
				for (uint32_t k = t->k0; k < kf && !split; k++)
					split = k - pow2floor(k) == p;
				for (; split && i < end; i++) {
					const struct srcid *x = &t->src[i];
					const char *f = t->srcbytes.data + x->f_off;
					uint32_t dst;

					if (x->f_len < 3)
						continue; /* the marker "" never moves */
					dst = shard_of(field_hash((const unsigned char *)f, x->f_len, 0), kf);
					if (dst == p)
						continue;
					if (!add_op(g, p, true, f, x->f_len, NULL, 0) ||
					    !add_op(g, dst, false, f, x->f_len, t->srcbytes.data + x->v_off, x->v_len))
						return false;
					moved++;
				}
				/* A hash a split emptied is gone from Redis: writes to it set its expiry. */
				if (split && moved > 0 && moved == all && p < made)
					made = p;
				if (split && moved > 0 && moved == all && p < exp_from)
					exp_from = p;
				i = end;
			}
			for (size_t i = 0; i < t->nev; i++) {
				struct nev *v = &t->ev[i];

				if (!v->fresh && !v->renew)
					continue;
				if (!add_op(g, shard_of(v->h, kf), false, vat(s, t, v, v->f), v->f.len, off,
				            (size_t)offl))
					return false;
			}
			if (g->nops > 1)
				qsort(g->ops, g->nops, sizeof(*g->ops), cmp_op);
			for (size_t o = 0; o < g->nops;) {
				size_t end = o;
				bool del = g->ops[o].del;

				while (end < g->nops && g->ops[end].j == g->ops[o].j && g->ops[end].del == del)
					end++;
				resp_array(b, 2 + (end - o) * (del ? 1 : 2));
				resp_str(b, del ? "HDEL" : "HSET");
				bulk_shard(b, s, e, t, &curb, g->ops[o].j);
				for (size_t i = o; i < end; i++) {
					resp_bulk(b, g->ops[i].f, g->ops[i].flen);
					if (!del)
						resp_bulk(b, g->ops[i].v, g->ops[i].vlen);
				}
				if (!want(g, W_QUEUED, t, UINT32_MAX))
					return false;
				if (!del && g->ops[o].j >= exp_from) {
					resp_array(b, 3);
					resp_str(b, "EXPIREAT");
					bulk_shard(b, s, e, t, &curb, g->ops[o].j);
					bulk_i64(b, (cur + 1) * span + win);
					if (!want(g, W_QUEUED, t, UINT32_MAX))
						return false;
				}
				o = end;
			}
		}
		/* The index: the current bucket's record, "legacy" once, buckets out of the window. */
		{
			bool rec = any && (newbk || c != c0 || kf != curb.k || made != curb.made);
			bool leg = t->legacy < 0;

			if (rec || leg) {
				resp_array(b, 2 + 2 * (rec + leg));
				resp_str(b, "HSET");
				bulk_span(b, s, e, t->arg[A_BASE]);
				if (rec) {
					char r[96];
					int rl = snprintf(r, sizeof(r), "%" PRIu32 " %" PRIu32 " %" PRIu32 " %" PRId64,
					                  kf, c, made, span);

					resp_str(b, curb.name);
					resp_bulk(b, r, (size_t)rl);
				}
				if (leg) {
					resp_str(b, "legacy");
					bulk_i64(b, legacy_until(t));
				}
				if (!want(g, W_QUEUED, t, UINT32_MAX))
					return false;
			}
			if (t->nstale) {
				resp_array(b, 2 + t->nstale);
				resp_str(b, "HDEL");
				bulk_span(b, s, e, t->arg[A_BASE]);
				buf_append(b, t->stale.data, t->stale.len);
				if (!want(g, W_QUEUED, t, UINT32_MAX))
					return false;
			}
		}
		if (any) {
			curb.k = kf;
			curb.c = c;
			curb.made = made;
			if (newbk) {
				curb.b = cur;
				curb.sp = span;
				curb.age = into;
			}
			/* For the id record, once EXEC has succeeded (exec_done). */
			t->rec_write = true;
			t->rec_created = newbk;
			t->rec_c0 = c0;
			t->rec_c1 = c;
			t->rec_k0 = t->cur >= 0 ? t->bk[t->cur].k : 0;
			t->rec_k1 = kf;
			t->rec_start = curb.b * curb.sp;
			memcpy(t->rec_name, curb.name, sizeof(t->rec_name));
		}
		remember(s, g, t, e, top, any ? &curb : NULL);
	}
	/* The watermark: written by every call, so WAIT has a write to wait for. */
	resp_array(b, 3);
	resp_str(b, "SET");
	bulk_span(b, s, e, t->arg[A_WM]);
	buf_putc(b, '$');
	buf_put_u64(b, strlen(top) + 1 + strlen(s->q.owner));
	buf_append(b, "\r\n", 2);
	buf_puts(b, top);
	buf_putc(b, ' ');
	buf_puts(b, s->q.owner);
	buf_append(b, "\r\n", 2);
	if (!want(g, W_QUEUED, t, UINT32_MAX))
		return false;
	return !b->failed;
}

/* ---- the group's rounds ---- */

static struct sq_ent *batch_ent(struct sink_redis *s, const struct nbatch *t)
{
	return sq_ent(&s->q, t->seq);
}

static void round_start(struct group *g)
{
	buf_reset(&g->cmd);
	g->nwant = g->next = 0;
	g->nqueued = 0;
	g->failed = g->ask = false;
	g->err[0] = '\0';
}

/*
 * Read 1 of every batch: the watermarks, the stream keys' types, the dedup indexes
 * (and with guess, read 2 as predicted: not for a group read ahead, which
 * forms from the calls that queued during one round trip instead of two).
 */
static bool build_read1(struct sink_redis *s, struct group *g, bool guess)
{
	struct buf *b = &g->cmd;
	bool any_dd = false;

	round_start(g);
	resp_array(b, 1);
	resp_str(b, "UNWATCH");
	if (!want(g, W_IGNORE, NULL, 0))
		return false;
	for (size_t i = 0; i < g->nb; i++) {
		struct nbatch *t = &g->b[i];
		const struct sq_ent *e = batch_ent(s, t);

		clear_read1(t);
		for (size_t k = 0; k < t->nev; k++)
			t->ev[k].old_hit = false;
		t->win = window(s, e, t);
		t->spec = false;
		any_dd = any_dd || t->win > 0;
	}
	/*
	 * The dead-letter streams too: the function's only other key, which the
	 * ACL must cover before anything is written (the function gets it when a
	 * stream key refuses an entry).
	 */
	for (size_t i = 0; i < g->nb; i++) {
		struct nbatch *t = &g->b[i];
		const struct sq_ent *e = batch_ent(s, t);

		/* One WATCH per batch: an ACL refusal names the batch whose keys it refused. */
		resp_array(b, 4 + legwm_differs(s, e, t) + (t->win > 0));
		resp_str(b, "WATCH");
		bulk_span(b, s, e, t->arg[A_STREAM]);
		bulk_span(b, s, e, t->arg[A_DL]);
		bulk_span(b, s, e, t->arg[A_WM]);
		if (legwm_differs(s, e, t))
			bulk_span(b, s, e, t->arg[A_LEGWM]);
		if (t->win > 0)
			bulk_span(b, s, e, t->arg[A_BASE]);
		if (!want(g, W_IGNORE, t, 0))
			return false;
	}
	for (size_t i = 0; i < g->nb; i++) {
		struct nbatch *t = &g->b[i];
		const struct sq_ent *e = batch_ent(s, t);

		resp_array(b, 2);
		resp_str(b, "GET");
		bulk_span(b, s, e, t->arg[A_WM]);
		if (!want(g, W_WM, t, 0))
			return false;
		if (legwm_differs(s, e, t)) {
			resp_array(b, 2);
			resp_str(b, "GET");
			bulk_span(b, s, e, t->arg[A_LEGWM]);
			if (!want(g, W_LEGWM, t, 0))
				return false;
		}
		resp_array(b, 2);
		resp_str(b, "TYPE");
		bulk_span(b, s, e, t->arg[A_STREAM]);
		if (!want(g, W_TYPE, t, 0))
			return false;
	}
	if (any_dd) {
		resp_array(b, 1);
		resp_str(b, "TIME");
		if (!want(g, W_TIME, NULL, 0))
			return false;
		for (size_t i = 0; i < g->nb; i++) {
			struct nbatch *t = &g->b[i];

			if (t->win <= 0)
				continue;
			resp_array(b, 2);
			resp_str(b, "HGETALL");
			bulk_span(b, s, batch_ent(s, t), t->arg[A_BASE]);
			if (!want(g, W_INDEX, t, 0))
				return false;
		}
	}
	g->specs = false;
	for (size_t i = 0; guess && s->cf->native_predict && i < g->nb; i++)
		if (g->b[i].win > 0 && !predict(s, g, &g->b[i], batch_ent(s, &g->b[i])))
			return false;
	g->phase = NAT_READ1;
	g->due = true;
	return !b->failed;
}

/* Unit t goes through the function after all: its calls are sent after this round's bytes. */
static bool hand_off(struct sink_redis *s, struct group *g, struct nbatch *t)
{
	t->to_function = true;
	for (size_t i = 0; i < t->nmem; i++) {
		struct sq_ent *e = sq_ent(&s->q, t->mem[i].seq);

		if (e)
			e->no_native = true;
		if (!grow((void **)&g->handoff, &g->caphandoff, g->nhandoff + 1, sizeof(*g->handoff)))
			return false;
		g->handoff[g->nhandoff++] = t->mem[i].seq;
	}
	return true;
}

/* Drop the batches handed off from the group (their replies are the function's). */
static void compact(struct group *g)
{
	size_t k = 0;

	for (size_t i = 0; i < g->nb; i++) {
		if (g->b[i].to_function)
			continue;
		if (k != i) {
			struct nbatch tmp = g->b[k];

			g->b[k] = g->b[i];
			g->b[i] = tmp; /* keeps each batch's buffers owned by one slot */
		}
		g->b[k].idx = (uint32_t)k;
		k++;
	}
	g->nb = k;
}

/* Every batch left is decided: MULTI, each batch's writes, EXEC (or only UNWATCH). */
static bool build_write(struct sink_redis *s, struct group *g)
{
	struct buf *b = &g->cmd;

	compact(g);
	round_start(g);
	if (g->nb == 0) {
		/*
		 * All handed off: drop the watches; the function calls follow. Its
		 * reply is a mark of its own (SQ_UNWATCH_MARK), not a want: the next
		 * group may start before it comes.
		 */
		resp_array(b, 1);
		resp_str(b, "UNWATCH");
		g->unwatch_only = true;
		g->phase = NAT_IDLE;
		g->due = true;
		return !b->failed;
	}
	resp_array(b, 1);
	resp_str(b, "MULTI");
	if (!want(g, W_IGNORE, NULL, 0))
		return false;
	g->nqueued = 0;
	for (size_t i = 0; i < g->nb; i++)
		if (!batch_write(s, g, &g->b[i], batch_ent(s, &g->b[i])))
			return false;
	resp_array(b, 1);
	resp_str(b, "EXEC");
	if (!want(g, W_EXEC, NULL, 0))
		return false;
	g->phase = NAT_EXEC;
	g->due = true;
	return !b->failed;
}

static bool take_calls(struct sink_redis *s, struct node *n, struct group *g, bool late);

/* Read 1 answered: refuse, take the calls that continue its units, hand off, or read 2. */
static bool read1_done(struct sink_redis *s, struct node *n, struct group *g)
{
	bool reads = false;

	for (size_t i = 0; i < g->nb; i++) {
		struct nbatch *t = &g->b[i];
		struct sq_ent *e = batch_ent(s, t);
		char msg[400];
		struct span wmk = t->arg[A_WM];
		struct span ex = t->arg[A_EXPECT];

		if (t->foreign[0]) {
			snprintf(msg, sizeof(msg), "OUTBOX_FOREIGN %.*s belongs to %s", (int)wmk.len,
			         at(s, e, wmk), t->foreign);
			return sink_publish_error(s, e, msg); /* the function's own error */
		}
		if (ex.len &&
		    (!t->wm_found || memcmp(t->wm, at(s, e, ex), ex.len < 25 ? ex.len : 25) < 0)) {
			snprintf(msg, sizeof(msg), "OUTBOX_BEHIND %.*s is at %s, expected %.*s", (int)wmk.len,
			         at(s, e, wmk), t->wm_found ? t->wm : "nothing", (int)ex.len, at(s, e, ex));
			return sink_publish_error(s, e, msg); /* the function's own error */
		}
	}
	/* A unit with a predicted read 2 keeps its events: its answers are per event. */
	if (!g->specs && !take_calls(s, n, g, true))
		return false;
	if (g->specs) {
		/* Read 1's round, kept to compare each unit's read 2 with its prediction. */
		SWAP(struct buf, g->cmd, g->spec);
		if (!grow((void **)&g->swant, &g->capswant, g->nwant, sizeof(*g->swant)))
			return false;
		memcpy(g->swant, g->want, g->nwant * sizeof(*g->want));
	}
	round_start(g);
	g->seed_left = seed_budget(s, g);
	for (size_t i = 0; i < g->nb; i++) {
		struct nbatch *t = &g->b[i];
		struct sq_ent *e = batch_ent(s, t);

		if (t->other_type) {
			/* The function dead-letters what the stream key refuses. */
			if (!hand_off(s, g, t))
				return false;
			continue;
		}
		if (!read2_or_predicted(s, g, t, e))
			return false;
	}
	reads = g->nwant > 0;
	if (!reads)
		return build_write(s, g);
	g->phase = NAT_READ2;
	g->due = true;
	return !g->cmd.failed;
}

/*
 * Unit t's EXEC succeeded: the ids it added to the current bucket go into the
 * record when the record held every id before (or the write made the bucket).
 */
static void record_write(struct sink_redis *s, struct group *g, const struct nbatch *t)
{
	struct span st = t->arg[A_STREAM];
	struct drec_set *set;

	s->stats.lookups_skipped += t->nskip;
	if (s->m && t->nskip)
		atomic_fetch_add_explicit(&s->m->lookups_skipped, t->nskip, memory_order_relaxed);
	/* The hashes read 2 read into the record, before this write's own ids. */
	for (size_t bi = 0; g->nt->rec && bi < t->nbk; bi++) {
		const struct bucket *bk = &t->bk[bi];
		size_t n = 0;

		if (bk->seed_to <= bk->seed_from)
			continue;
		set = drec_seed(g->nt->rec, at(s, batch_ent(s, t), st), st.len, bk->name, bk->b * bk->sp,
		                bk->k, bk->c, bk->seed_from);
		for (size_t i = 0; set && i < t->nseed; i++)
			if (t->seed[i].bk == bi) {
				drec_add(g->nt->rec, set, t->seed[i].h);
				n++;
			}
		drec_seed_done(set, bk->seed_to);
		s->stats.record_ids_read += n;
		if (s->m && n)
			atomic_fetch_add_explicit(&s->m->record_ids_read, n, memory_order_relaxed);
	}
	if (!t->rec_write || !g->nt->rec)
		goto done;
	set = drec_open(g->nt->rec, at(s, batch_ent(s, t), st), st.len, t->rec_name, t->rec_start,
	                t->rec_created, t->rec_c0, t->rec_k0);
	for (size_t k = 0; set && k < t->nev; k++)
		if (t->ev[k].fresh)
			drec_add(g->nt->rec, set, t->ev[k].rh);
	/* A bucket still being read: the ids this write moved between its hashes, too. */
	for (size_t i = 0; drec_seeding(set) && i < t->nsrc; i++)
		drec_add(g->nt->rec, set, drec_hash(t->srcbytes.data + t->src[i].f_off, t->src[i].f_len));
	drec_seal(set, t->rec_c1, t->rec_k1);
done:
	if (s->m)
		atomic_store_explicit(&s->m->record_bytes, s->drec_budget.used, memory_order_relaxed);
}

static bool exec_done(struct sink_redis *s, struct node *n, struct group *g, const redisReply *r)
{
	if (r->type == REDIS_REPLY_NIL) {
		/* A watched key changed between the reads and EXEC: read again. */
		s->stats.watch_retries++;
		if (s->m)
			atomic_fetch_add_explicit(&s->m->watch_retries, 1, memory_order_relaxed);
		/* Someone else wrote: what this group would have left is not what its streams hold. */
		for (size_t i = 0; i < g->nb; i++) {
			struct span st = g->b[i].arg[A_STREAM];
			struct pred *p = pred_find(g->nt, at(s, batch_ent(s, &g->b[i]), st), st.len);

			if (p)
				p->slen = 0;
		}
		if (++g->tries >= NATIVE_MAX_TRIES) {
			for (size_t i = 0; i < g->nb; i++)
				if (!hand_off(s, g, &g->b[i]))
					return false;
			return build_write(s, g);
		}
		return build_read1(s, g, true);
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != g->nqueued) {
		snprintf(s->errmsg, sizeof(s->errmsg),
		         "unexpected reply to EXEC of a native batch: type %d, %zu of %zu results", r->type,
		         r->type == REDIS_REPLY_ARRAY ? (size_t)r->elements : (size_t)0, g->nqueued);
		return false;
	}
	/* An error in the array means Redis ran only part of it. */
	for (size_t i = 0; i < r->elements; i++)
		if (r->element[i]->type == REDIS_REPLY_ERROR) {
			s->errkind = SINK_ERR_LOST;
			snprintf(s->errmsg, sizeof(s->errmsg),
			         "a command of a native batch failed inside EXEC (%s): its watermark moved "
			         "past events that may not be in the stream; republish from the outbox table",
			         r->element[i]->str);
			return false;
		}
	g->phase = NAT_IDLE;
	for (size_t i = 0; i < g->nb; i++) {
		struct nbatch *t = &g->b[i];
		size_t x = t->exec_first;
		redisReply *res, **ptr;

		if (!grow((void **)&g->res, &g->capres, t->nev + 1, sizeof(*g->res)) ||
		    !grow((void **)&g->resp, &g->capresp, t->nev + 1, sizeof(*g->resp))) {
			snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
			return false;
		}
		record_write(s, g, t);
		res = g->res;
		ptr = g->resp;
		memset(res, 0, t->nev * sizeof(*res));
		for (size_t k = 0; k < t->nev; k++) {
			ptr[k] = &res[k];
			if (t->ev[k].res == 3) {
				res[k].type = REDIS_REPLY_STRING;
				res[k].str = r->element[x]->str;
				res[k].len = r->element[x]->len;
				x++;
			} else {
				res[k].type = REDIS_REPLY_INTEGER;
				res[k].integer = t->ev[k].res;
			}
		}
		/* Each member's results, as its own function call would have returned them. */
		for (size_t m = 0; m < t->nmem; m++) {
			struct sq_ent *e = sq_ent(&s->q, t->mem[m].seq);
			redisReply arr;

			if (!e)
				continue;
			memset(&arr, 0, sizeof(arr));
			arr.type = REDIS_REPLY_ARRAY;
			arr.elements = t->mem[m].n;
			arr.element = ptr + t->mem[m].first;
			s->stats.native_batches++;
			if (s->m)
				atomic_fetch_add_explicit(&s->m->batches_native, 1, memory_order_relaxed);
			if (!sink_publish_done(s, n, e, &arr))
				return false;
		}
	}
	g->nb = 0;
	return true;
}

/* Whether e goes the native way. */
static bool takes(const struct sink_redis *s, const struct sq_ent *e)
{
	return e->kind == SQ_PUBLISH && !e->ext && !e->asking && !e->no_native && !s->q.republish;
}

static bool stop_at_native(void *ctx, const struct sq_ent *e)
{
	return takes(ctx, e);
}

/*
 * Where e goes in the group: -1 a new unit, i >= 0 unit i (e is the next call
 * for its stream: it expects the watermark where that unit's last call leaves
 * it), -2 not in this group (bytes: the group's calls so far).
 */
static int joins(struct sink_redis *s, const struct group *g, const struct sq_ent *e, size_t bytes)
{
	const struct sq_ent *first;
	struct span arg[A_FIRST_EVENT];
	size_t off;
	const char *p = sq_bytes(&s->q, e);

	if (!takes(s, e) || !parse_args(s, e, arg, &off))
		return -2;
	if (g->nb == 0)
		return -1;
	if (bytes + e->len > NATIVE_GROUP_BYTES)
		return -2;
	first = sq_ent(&s->q, g->b[0].seq);
	if (s->slot_node && first && first->slot != e->slot)
		return -2; /* MULTI/EXEC stays in one slot */
	for (size_t i = 0; i < g->nb; i++) {
		const struct nbatch *t = &g->b[i];
		const struct sq_ent *o = sq_ent(&s->q, t->seq);
		struct span a = t->arg[A_STREAM], x = arg[A_EXPECT];
		const struct member *last = &t->mem[t->nmem - 1];

		if (!o || arg[A_STREAM].len != a.len ||
		    memcmp(p + arg[A_STREAM].off, at(s, o, a), a.len) != 0)
			continue;
		/* Its stream's unit: e follows that unit's last call, or the group ends here. */
		if (x.len == 25 && memcmp(p + x.off, last->last, 25) == 0 && t->nmem < UINT16_MAX)
			return (int)i;
		return -2;
	}
	return -1;
}

/*
 * Move the calls at the head of n->sendq that the native path takes into
 * group g, in order: new units too unless late (then only calls that continue
 * one of g's units: read 1 watched and read their keys already). Each call
 * taken leaves the sendq: g owns it until its EXEC answers or the connection
 * closes. The first call that does not join stops it.
 */
static bool take_calls(struct sink_redis *s, struct node *n, struct group *g, bool late)
{
	while (!n->part_seq && n->sendq.len > 0) {
		struct sq_ent *e = sq_ent(&s->q, *(const uint64_t *)ring_at(&n->sendq, 0));
		struct nbatch *t;
		int u;

		if (!e || e->state != SQ_ROUTED)
			break;
		if ((u = joins(s, g, e, g->bytes)) == -2 || (late && u < 0)) {
			if (u == -2 && g->nb == 0)
				e->no_native = true; /* a call it cannot read: the function's */
			break;
		}
		if (u < 0) {
			if (!grow((void **)&g->b, &g->capb, g->nb + 1, sizeof(*g->b)))
				return false;
			t = &g->b[g->nb];
			t->seq = e->seq;
			t->idx = (uint32_t)g->nb;
			t->nmem = 0;
		} else {
			t = &g->b[u];
		}
		if (!parse_batch(s, t, e)) {
			e->no_native = true; /* not the call this file knows: the function's */
			break;
		}
		(void)ring_pop_u64(&n->sendq);
		g->bytes += e->len;
		if (u < 0)
			g->nb++;
		if (late)
			s->stats.native_late++;
	}
	return true;
}

/* Form group g from the calls at the head of n->sendq (none: g->nb stays 0). */
static bool take_group(struct sink_redis *s, struct node *n, struct group *g)
{
	g->bytes = 0;
	g->nb = 0;
	g->tries = 0;
	return take_calls(s, n, g, false);
}

/* g's round (cmd) into n->wbuf, a mark per reply it expects into n->waitq. */
static bool stage_round(struct node *n, struct group *g)
{
	g->due = false;
	buf_append(&n->wbuf, g->cmd.data, g->cmd.len);
	for (size_t i = g->next; i < g->nwant; i++)
		if (!ring_push_u64(&n->waitq, SQ_NATIVE_MARK))
			return false;
	return !n->wbuf.failed;
}

/*
 * Behind cur's EXEC: read 1 of the group after it (formed now from the
 * sendq's head, or formed before and voided), when the sendq's head is the
 * native path's. Nothing else is staged here.
 */
static bool stage_ahead(struct sink_redis *s, struct node *n, struct native *nt)
{
	struct group *a = nt->ahead;

	if (nt->ahead_sent || n->part_seq)
		return true;
	if (!a) {
		a = nt->cur == &nt->grp[0] ? &nt->grp[1] : &nt->grp[0];
		if (!take_group(s, n, a))
			return false;
		if (a->nb == 0)
			return true;
		nt->ahead = a;
		s->stats.native_groups++;
		s->stats.native_ahead++;
	}
	if (!build_read1(s, a, false) || !stage_round(n, a))
		return false;
	nt->ahead_sent = true;
	return true;
}

/* cur's EXEC did not succeed: a read staged ahead of it is dropped as it comes. */
static void void_ahead(struct sink_redis *s, struct native *nt)
{
	struct group *a = nt->ahead;

	if (!a || !nt->ahead_sent)
		return;
	nt->discard += a->nwant - a->next;
	a->phase = NAT_IDLE;
	a->due = false;
	a->nwant = a->next = 0;
	nt->ahead_sent = false;
	s->stats.ahead_voided++;
}

/*
 * Stage into n->wbuf what the native group on n has to send (behind an EXEC,
 * the next group's read 1), then (when none is in flight) the commands that
 * follow in n->sendq up to the next batch the native path takes, and the
 * group of batches that starts there.
 */
bool sink_native_stage(struct sink_redis *s, struct node *n, size_t limit)
{
	struct native *nt = n->nat;
	struct group *g;

	if (!nt) {
		if (!(nt = n->nat = calloc(1, sizeof(*nt))))
			return false;
		if (s->drec_budget.limit > 0 && !(nt->rec = drec_new(&s->drec_budget)))
			return false;
		nt->cur = &nt->grp[0];
		nt->grp[0].nt = nt->grp[1].nt = nt;
	}
	g = nt->cur;
	if (g->due) {
		bool unwatch_only = g->unwatch_only;

		if (!stage_round(n, g))
			return false;
		if (unwatch_only && !ring_push_u64(&n->waitq, SQ_UNWATCH_MARK))
			return false;
		g->unwatch_only = false;
		if (g->phase == NAT_EXEC)
			n->staged_publish = true;
		/* Hand-offs go after EXEC (or UNWATCH), never between the reads and EXEC:
		 * their writes (a dead letter) would fail the watch. */
		for (size_t i = 0; (g->phase == NAT_EXEC || g->phase == NAT_IDLE) && i < g->nhandoff; i++) {
			struct sq_ent *e = sq_ent(&s->q, g->handoff[i]);

			if (e && e->state == SQ_ROUTED && !sq_stage_entry(&s->q, e, &n->waitq, &n->wbuf))
				return false;
			n->staged_publish = true;
		}
		if (g->phase == NAT_EXEC || g->phase == NAT_IDLE)
			g->nhandoff = 0;
		if (n->wbuf.failed)
			return false;
		if (g->phase == NAT_EXEC && !stage_ahead(s, n, nt))
			return false;
	}
	if (g->phase != NAT_IDLE)
		return true; /* its replies first */
	if (nt->ahead) {
		/* Formed before (read ahead, then voided): its calls come before the sendq's. */
		nt->cur = nt->ahead;
		nt->ahead = NULL;
		if (!build_read1(s, nt->cur, true))
			return false;
		return sink_native_stage(s, n, limit);
	}
	for (;;) {
		if (!sq_stage_until(&s->q, &n->sendq, &n->waitq, &n->wbuf, limit, &n->part_seq,
		                    &n->part_off, &n->staged_publish, stop_at_native, s))
			return false;
		if (n->part_seq || n->sendq.len == 0 || n->wbuf.len >= limit)
			return true;
		if (!take_group(s, n, g))
			return false;
		if (g->nb > 0)
			break;
	}
	s->stats.native_groups++;
	if (!build_read1(s, g, true))
		return false;
	return sink_native_stage(s, n, limit);
}

bool sink_native_reply(struct sink_redis *s, struct node *n, const redisReply *r)
{
	struct native *nt = n->nat;
	struct group *g = nt ? nt->cur : NULL;
	struct nbatch *t = NULL;
	struct sq_ent *e = NULL;
	struct want w;

	if (nt && nt->discard > 0) {
		nt->discard--; /* a read ahead that was voided: read again later */
		return true;
	}
	if (!g || g->next >= g->nwant) {
		snprintf(s->errmsg, sizeof(s->errmsg), "reply for no native command");
		return false;
	}
	w = g->want[g->next++];
	if (w.batch < g->nb) {
		t = &g->b[w.batch];
		e = batch_ent(s, t);
	}
	if (g->nb > 0 && (!e || e->state != SQ_ROUTED)) {
		snprintf(s->errmsg, sizeof(s->errmsg), "reply for a native batch no longer in flight");
		return false;
	}
	if (r->type == REDIS_REPLY_ERROR && w.kind != W_EXEC) {
		if (!g->failed) {
			g->failed = true;
			g->err_batch = w.batch;
			g->ask = strncmp(r->str, "ASK ", 4) == 0;
			snprintf(g->err, sizeof(g->err), "%s", r->str);
		}
	} else if (!g->failed) {
		bool ok;
		int64_t v;

		switch ((enum want_kind)w.kind) {
		case W_IGNORE:
		case W_QUEUED:
		case W_EXEC:
			break;
		case W_WM:
		case W_LEGWM:
			take_wm(s, t, r);
			break;
		case W_TYPE:
			t->other_type = !str_eq(r, "stream") && !str_eq(r, "none");
			break;
		case W_TIME:
			v = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? reply_int(r->element[0], &ok)
			                                                     : (ok = false, 0);
			if (!ok) {
				snprintf(s->errmsg, sizeof(s->errmsg), "unexpected reply to TIME");
				return false;
			}
			for (size_t i = 0; i < g->nb; i++)
				g->b[i].now = v;
			break;
		case W_INDEX:
			take_index(t, r, t->win);
			break;
		case W_LOOKUP:
			for (size_t i = w.a, k = 0; i < t->npairs; i++, k++) {
				const struct pair *p = &t->pairs[i];

				if (p->bk != t->pairs[w.a].bk || p->j != t->pairs[w.a].j)
					break;
				if (r->type == REDIS_REPLY_ARRAY && k < r->elements &&
				    r->element[k]->type == REDIS_REPLY_STRING) {
					v = digits(r->element[k]->str, r->element[k]->len);
					t->val[p->bk * t->nev + p->ev] = v < 0 ? 0 : v;
				}
			}
			break;
		case W_SOURCE:
			for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
				struct srcid x;

				if (!grow((void **)&t->src, &t->capsrc, t->nsrc + 1, sizeof(*t->src)))
					return false;
				x.hash = w.a;
				x.f_off = (uint32_t)t->srcbytes.len;
				x.f_len = (uint32_t)r->element[i]->len;
				buf_append(&t->srcbytes, r->element[i]->str, r->element[i]->len);
				x.v_off = (uint32_t)t->srcbytes.len;
				x.v_len = (uint32_t)r->element[i + 1]->len;
				buf_append(&t->srcbytes, r->element[i + 1]->str, r->element[i + 1]->len);
				t->src[t->nsrc++] = x;
			}
			break;
		case W_EXISTS:
			t->ev[w.a].old_hit = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
			break;
		case W_SEED:
			for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
				const redisReply *f = r->element[i];

				if (f->type != REDIS_REPLY_STRING)
					continue;
				if (!grow((void **)&t->seed, &t->capseed, t->nseed + 1, sizeof(*t->seed)))
					return false;
				t->seed[t->nseed++] = (struct seedid){drec_hash(f->str, f->len), w.a};
			}
			break;
		}
	}
	if (w.kind == W_EXEC && !g->failed && r->type != REDIS_REPLY_ERROR) {
		if (!exec_done(s, n, g, r))
			return false;
		if (r->type == REDIS_REPLY_NIL) {
			void_ahead(s, nt); /* cur reads again (or goes to the function) first */
		} else if (nt->ahead_sent) {
			/* Written: the group read ahead is the one in flight now. */
			nt->cur = nt->ahead;
			nt->ahead = NULL;
			nt->ahead_sent = false;
		}
		return true;
	}
	if (g->next < g->nwant)
		return true; /* more replies of this round to come */
	if (g->failed || r->type == REDIS_REPLY_ERROR) {
		/* The round failed (an EXECABORT: the first refusal is in err). */
		struct sq_ent *bad = g->err_batch < g->nb ? batch_ent(s, &g->b[g->err_batch]) : NULL;

		if (!g->failed)
			snprintf(g->err, sizeof(g->err), "%s", r->str);
		g->phase = NAT_IDLE;
		if (g->ask) {
			/* A slot on the move: the function follows ASK; the group's batches go that way. */
			for (size_t i = 0; i < g->nb; i++)
				for (size_t m = 0; m < g->b[i].nmem; m++) {
					struct sq_ent *x = sq_ent(&s->q, g->b[i].mem[m].seq);

					if (!x)
						continue;
					x->no_native = true;
					if (!sink_follow_ask(s, x, g->err))
						return false;
				}
			g->nb = 0;
			void_ahead(s, nt);
			return true;
		}
		return sink_publish_error(s, bad ? bad : batch_ent(s, &g->b[0]), g->err);
	}
	switch (g->phase) {
	case NAT_READ1:
		return read1_done(s, n, g);
	case NAT_READ2:
		return build_write(s, g);
	default:
		snprintf(s->errmsg, sizeof(s->errmsg), "native batch out of step");
		return false;
	}
}
