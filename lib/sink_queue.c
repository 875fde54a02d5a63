/*
 * sink_queue.c - the sink's command ring, batch encoder and reply
 * bookkeeping: which command a reply answers, when a command is done, how
 * far the done prefix (acked_seq) reaches, what is sent again after a lost
 * connection or an ASK redirect. No sockets: sink_redis.c does the I/O,
 * sink_reply.c the messages; tests/unit/test_sink_queue.c drives this with replies parsed
 * by hiredis's reader.
 */
#include "sink_queue.h"

#include <stdlib.h>
#include <string.h>

#include "cluster_slots.h"
#include "sink_redis.h"
#include "sink_script.h"

#define POSMAP_MAX 65536 /* streams remembered before done ones are forgotten */

/* ---- last position per stream ---- */

static struct sq_lastpos *posmap_find(const struct sq_posmap *pm, const char *s, size_t n)
{
	size_t i;

	if (!pm->v)
		return NULL;
	for (i = fnv1a64(s, n) & (pm->cap - 1); pm->v[i].stream; i = (i + 1) & (pm->cap - 1))
		if (pm->v[i].len == n && memcmp(pm->v[i].stream, s, n) == 0)
			return &pm->v[i];
	return NULL;
}

static void posmap_finish(struct sq_posmap *pm)
{
	for (size_t i = 0; i < pm->cap; i++)
		free(pm->v[i].stream);
	free(pm->v);
	*pm = (struct sq_posmap){0};
}

/*
 * Rebuild into cap slots, keeping the entries whose call is not yet done
 * (seq > acked), or all of them when acked is UINT64_MAX. Forgetting a done
 * call is safe: Redis already moved the watermark to its position, so the
 * next call for that stream simply states no expectation.
 */
static bool posmap_rebuild(struct sq_posmap *pm, size_t cap, uint64_t acked)
{
	struct sq_posmap n = {calloc(cap, sizeof(struct sq_lastpos)), cap, 0};

	if (!n.v)
		return false;
	for (size_t i = 0; i < pm->cap; i++) {
		struct sq_lastpos *e = &pm->v[i];
		size_t j;

		if (!e->stream)
			continue;
		if (acked != UINT64_MAX && e->seq <= acked) {
			free(e->stream);
			continue;
		}
		for (j = fnv1a64(e->stream, e->len) & (cap - 1); n.v[j].stream; j = (j + 1) & (cap - 1))
			;
		n.v[j] = *e;
		n.used++;
	}
	free(pm->v);
	*pm = n;
	return true;
}

/* The entry for stream s, created empty when absent; NULL when out of memory. */
static struct sq_lastpos *posmap_get(struct sq_posmap *pm, const char *s, size_t n, uint64_t acked)
{
	struct sq_lastpos *e = posmap_find(pm, s, n);
	size_t i;

	if (e)
		return e;
	if (!pm->v && !posmap_rebuild(pm, 1024, UINT64_MAX))
		return NULL;
	if ((pm->used + 1) * 2 > pm->cap) {
		size_t cap = pm->cap < POSMAP_MAX ? pm->cap * 2 : pm->cap;

		if (!posmap_rebuild(pm, cap, pm->cap < POSMAP_MAX ? UINT64_MAX : acked))
			return NULL;
		if ((pm->used + 1) * 2 > pm->cap && !posmap_rebuild(pm, pm->cap * 2, UINT64_MAX))
			return NULL;
	}
	for (i = fnv1a64(s, n) & (pm->cap - 1); pm->v[i].stream; i = (i + 1) & (pm->cap - 1))
		;
	pm->v[i].stream = malloc(n ? n : 1);
	if (!pm->v[i].stream)
		return NULL;
	memcpy(pm->v[i].stream, s, n);
	pm->v[i].len = n;
	pm->v[i].seq = 0;
	pm->v[i].pos[0] = '\0';
	pm->v[i].events = 0;
	pm->v[i].held_events = 0;
	pm->used++;
	return &pm->v[i];
}

/* ---- the command ring ---- */

void sq_init(struct sink_queue *q, const struct relay_config *cf, bool cluster)
{
	q->cf = cf;
	q->cluster = cluster;
	q->q.item = sizeof(struct sq_ent);
	q->next_seq = 1;
}

static void ext_free(struct sink_queue *q, struct sq_ext **x)
{
	if (!*x)
		return;
	if ((*x)->hold_free)
		(*x)->hold_free((*x)->hold);
	q->ext_bytes -= (*x)->total;
	free(*x);
	*x = NULL;
}

void sq_finish(struct sink_queue *q)
{
	for (size_t i = 0; i < q->q.len; i++)
		ext_free(q, &((struct sq_ent *)ring_at(&q->q, i))->ext);
	ext_free(q, &q->b_ext);
	ring_finish(&q->q);
	buf_finish(&q->out);
	buf_finish(&q->key);
	buf_finish(&q->tag);
	buf_finish(&q->b_stream);
	buf_finish(&q->b_args);
	buf_finish(&q->b_prefix);
	posmap_finish(&q->last_pos);
}

static struct sq_ent *oldest(const struct sink_queue *q)
{
	return q->q.len ? ring_at(&q->q, 0) : NULL;
}

struct sq_ent *sq_ent(struct sink_queue *q, uint64_t seq)
{
	const struct sq_ent *first = oldest(q);

	if (!first || seq < first->seq || seq >= first->seq + q->q.len)
		return NULL;
	return ring_at(&q->q, (size_t)(seq - first->seq));
}

const char *sq_bytes(const struct sink_queue *q, const struct sq_ent *e)
{
	return q->out.data + (e->off - q->out_base);
}

/* Bytes on the wire: out's plus the segments'. */
size_t sq_cmd_len(const struct sq_ent *e)
{
	return e->len + (e->ext ? e->ext->total : 0);
}

void sq_advance(struct sink_queue *q)
{
	struct sq_ent *e;

	while ((e = oldest(q)) && e->state == SQ_DONE) {
		ext_free(q, &e->ext);
		q->acked_seq = e->seq;
		q->inflight_events -= e->nevents;
		ring_pop(&q->q);
	}
	if (!e) {
		q->out_base += q->out.len;
		q->out.len = 0;
	} else {
		size_t dead = (size_t)(e->off - q->out_base);

		if (dead > (1u << 20) && dead * 2 > q->out.len) {
			memmove(q->out.data, q->out.data + dead, q->out.len - dead);
			q->out.len -= dead;
			q->out_base += dead;
		}
	}
}

uint64_t sq_inflight_bytes(const struct sink_queue *q)
{
	const struct sq_ent *e = oldest(q);
	size_t live = e ? q->out.len - (size_t)(e->off - q->out_base) : 0;

	return live + q->ext_bytes + (q->b_open ? q->b_args.len : 0);
}

bool sq_route(struct sink_queue *q, struct sq_ent *e, struct ring *sendq, int idx, bool asking)
{
	(void)q;
	if (!ring_push_u64(sendq, e->seq))
		return false;
	e->node = (int8_t)idx;
	e->state = SQ_ROUTED;
	e->asking = asking;
	return true;
}

void sq_requeue(struct sink_queue *q)
{
	for (size_t i = 0; i < q->q.len; i++) {
		struct sq_ent *e = ring_at(&q->q, i);

		if (e->state != SQ_DONE) {
			e->state = SQ_QUEUED;
			e->node = -1;
			e->asking = false;
		}
	}
}

bool sq_void_record(struct sink_queue *q, uint64_t seq)
{
	struct sq_ent *e = sq_ent(q, seq);

	if (!e || e->kind != SQ_RECORD || e->state == SQ_DONE)
		return false;
	e->state = SQ_DONE;
	sq_advance(q);
	return true;
}

bool sq_prev_pending(struct sink_queue *q, const struct sq_ent *e)
{
	const struct sq_ent *prev = e->prev_seq ? sq_ent(q, e->prev_seq) : NULL;

	return e->prev_seq && e->prev_seq > q->acked_seq && (!prev || prev->state != SQ_DONE);
}

const char *sq_arg(const struct sink_queue *q, const struct sq_ent *e, size_t idx, size_t *len)
{
	const char *p = sq_bytes(q, e);
	size_t n = e->len;
	const char *end = p + n;
	size_t argc = 0;

	if (n < 4 || p[0] != '*')
		return NULL;
	argc = strtoul(p + 1, NULL, 10);
	if (idx >= argc || !(p = memchr(p, '\n', n)))
		return NULL;
	for (size_t i = 0; ++p < end && *p == '$'; i++) {
		size_t l = strtoul(p + 1, NULL, 10);
		const char *d = memchr(p, '\n', (size_t)(end - p));

		if (!d || (size_t)(end - d - 1) < l)
			return NULL;
		if (i == idx) {
			*len = l;
			return d + 1;
		}
		p = d + 1 + l + 1; /* past the data's \r\n */
	}
	return NULL;
}

const char *sq_kind_name(unsigned k)
{
	return k == SQ_GROUP    ? "XGROUP CREATE"
	       : k == SQ_DEAD   ? "dead-letter publish"
	       : k == SQ_RECORD ? "slot record write"
	       : k == SQ_GETREC ? "slot record read"
	       : k == SQ_TRIM   ? "--trim acked call"
	                        : "publish";
}

/* ---- the batch encoder ---- */

/* stream_hash_tag() gives "{x}" where x is what Redis hashes. */
uint16_t sq_stream_slot(const char *stream, size_t len, struct buf *tag)
{
	if (!stream_hash_tag(stream, len, tag) || tag->len < 2)
		return (uint16_t)(cluster_slots_crc16(stream, len) & (CLUSTER_SLOTS_COUNT - 1));
	return (uint16_t)(cluster_slots_crc16(tag->data + 1, tag->len - 2) & (CLUSTER_SLOTS_COUNT - 1));
}

/* Write v as width hex digits at out (no printf on the hot path). */
static void put_hex(char *out, uint64_t v, int width)
{
	static const char hex[] = "0123456789ABCDEF";

	for (int i = width - 1; i >= 0; i--, v >>= 4)
		out[i] = hex[v & 0xf];
}

static void resp_u64(struct buf *b, uint64_t v)
{
	char tmp[20];
	char *d = u64_to_dec(tmp + sizeof(tmp), v);

	resp_bulk(b, d, (size_t)(tmp + sizeof(tmp) - d));
}

/* Queue a command whose bytes are out[start..] and hand it to on_push. */
static bool push_command(struct sink_queue *q, struct sq_ent *ent, size_t start)
{
	struct sq_ent *e;

	ent->off = q->out_base + start;
	ent->len = q->out.len - start;
	ent->node = -1;
	ent->state = SQ_QUEUED;
	if (q->out.failed || !(e = ring_push(&q->q))) {
		ext_free(q, &ent->ext);
		return false;
	}
	*e = *ent;
	if (q->on_push)
		q->on_push(q->ctx, e);
	return true;
}

void sq_backlog_start(struct sink_queue *q, lsn_t from, lsn_t end)
{
	q->bl_from = from;
	q->bl_end = end;
	q->bl_at = from;
	for (size_t i = 0; i < q->last_pos.cap; i++) /* per-stream counts start again */
		q->last_pos.v[i].events = 0;
}

uint64_t sq_backlog_hint(const struct sink_queue *q, uint64_t n, uint64_t events)
{
	double more;

	if (events < SQ_HINT_MIN_EVENTS || !q->bl_end || q->bl_at >= q->bl_end ||
	    q->bl_at <= q->bl_from)
		return n;
	more = (double)events * (double)(q->bl_end - q->bl_at) / (double)(q->bl_at - q->bl_from);
	/* Capped far above the function's own cap (2^20 hashes of 24 ids). */
	return n + (uint64_t)(more < 1e12 ? more : 1e12);
}

void sq_held(struct sink_queue *q, uint64_t total)
{
	q->held_total = total;
	q->held_done = 0;
	if (total)
		for (size_t i = 0; i < q->last_pos.cap; i++)
			q->last_pos.v[i].held_events = 0;
}

uint64_t sq_held_hint(const struct sink_queue *q, uint64_t n, uint64_t events)
{
	double more;

	if (events < SQ_HINT_MIN_EVENTS || !q->held_done || q->held_done >= q->held_total)
		return n;
	more = (double)events * (double)(q->held_total - q->held_done) / (double)q->held_done;
	return n + (uint64_t)(more < 1e12 ? more : 1e12);
}

bool sq_close_batch(struct sink_queue *q)
{
	const struct relay_config *cf = q->cf;
	struct buf *b = &q->out;
	size_t start = b->len, dl_len = strlen(cf->dead_letter_stream);
	uint16_t slot;
	struct sq_lastpos *lp = NULL;
	struct sq_ent ent;
	uint64_t events = q->b_n, held = 0, hint, held_hint;

	if (!q->b_open)
		return true;
	q->b_open = false;
	if (!q->republish) {
		lp = posmap_get(&q->last_pos, q->b_stream.data, q->b_stream.len, q->acked_seq);
		if (!lp)
			return false;
		events = lp->events += q->b_n;
		if (q->held_total)
			held = lp->held_events += q->b_n;
	}
	(void)stream_hash_tag(q->b_stream.data, q->b_stream.len, &q->tag); /* checked when opened */
	slot = sq_stream_slot(q->b_stream.data, q->b_stream.len, &q->tag);
	/* FCALL name numkeys | stream wm legacy-wm dead-letter dedup-base |
	 * ttl maxlen owner expect slot old-dedup-prefix ids-to-come args... */
	resp_array(b, 3 + 5 + 7 + q->b_args_count);
	if (*q->use_functions) {
		resp_str(b, "FCALL");
		resp_str(b, SINK_SCRIPT_PUBLISH);
	} else {
		resp_str(b, "EVALSHA");
		resp_str(b, q->sha);
	}
	resp_u64(b, 5);
	resp_bulk(b, q->b_stream.data, q->b_stream.len);
	buf_reset(&q->key); /* watermark: <prefix>:wm:{tag}[#<len>:<stream>]:<slot> */
	(void)stream_key_base(&q->key, cf->key_prefix, "wm", q->b_stream.data, q->b_stream.len, true,
	                      &q->tag);
	buf_putc(&q->key, ':');
	buf_puts(&q->key, cf->slot);
	resp_bulk(b, q->key.data, q->key.len);
	buf_reset(&q->key); /* legacy (per tag) watermark: <prefix>:wm:{tag}:<slot> */
	(void)stream_key_base(&q->key, cf->key_prefix, "wm", q->b_stream.data, q->b_stream.len, false,
	                      &q->tag);
	buf_putc(&q->key, ':');
	buf_puts(&q->key, cf->slot);
	resp_bulk(b, q->key.data, q->key.len);
	/* Where entries the stream key refuses go, in the same call: the
	 * dead-letter stream, or in a cluster where that lives in another slot,
	 * "<dead-letter stream>{tag}" beside the stream ("{tag}<dead-letter
	 * stream>" when that name carries a tag of its own). */
	buf_reset(&q->key);
	if (q->cluster && sq_stream_slot(cf->dead_letter_stream, dl_len, &q->tag) != slot) {
		bool own_tag = !(q->tag.len == dl_len + 2 &&
		                 memcmp(q->tag.data + 1, cf->dead_letter_stream, dl_len) == 0);

		(void)stream_hash_tag(q->b_stream.data, q->b_stream.len, &q->tag);
		if (own_tag)
			buf_append(&q->key, q->tag.data, q->tag.len);
		buf_append(&q->key, cf->dead_letter_stream, dl_len);
		if (!own_tag)
			buf_append(&q->key, q->tag.data, q->tag.len);
	} else {
		buf_append(&q->key, cf->dead_letter_stream, dl_len);
	}
	resp_bulk(b, q->key.data, q->key.len);
	buf_reset(&q->key); /* dedup state: <prefix>:dd:{tag}[#<len>:<stream>] */
	(void)stream_key_base(&q->key, cf->key_prefix, "dd", q->b_stream.data, q->b_stream.len, true,
	                      &q->tag);
	resp_bulk(b, q->key.data, q->key.len);
	resp_u64(b, q->b_dead ? 0 : (uint64_t)cf->dedup_window_s);
	resp_u64(b, q->b_dead ? 0 : (uint64_t)cf->maxlen);
	resp_str(b, q->owner);
	resp_str(b, q->b_expect);
	resp_str(b, cf->slot);
	resp_bulk(b, q->b_prefix.data, q->b_prefix.len);
	hint = sq_backlog_hint(q, q->b_n, events);
	held_hint = sq_held_hint(q, q->b_n, held);
	resp_u64(b, held_hint > hint ? held_hint : hint);
	if (q->b_ext) /* segment offsets: from b_args to the command */
		for (size_t i = 0; i < q->b_ext->nseg; i++)
			q->b_ext->seg[i].at += b->len - start;
	buf_append(b, q->b_args.data, q->b_args.len);
	if (q->key.failed || q->tag.failed)
		return false;
	if (lp) {
		memcpy(lp->pos, q->b_last, sizeof(lp->pos));
		lp->seq = q->b_seq;
	}
	ent = (struct sq_ent){
	    .seq = q->b_seq,
	    .nevents = q->b_n,
	    .commit_us = q->b_commit_us,
	    .stream_id = q->b_stream_id,
	    .slot = slot,
	    .kind = q->b_dead ? SQ_DEAD : SQ_PUBLISH,
	    .dead_reason = q->b_dead_reason,
	    .prev_seq = q->b_prev_seq,
	    .ext = q->b_ext,
	    .max_value = q->b_max_value,
	};
	q->b_ext = NULL;
	return push_command(q, &ent, start);
}

bool sq_queue_groups(struct sink_queue *q, const char *stream, size_t len)
{
	uint16_t slot = sq_stream_slot(stream, len, &q->tag);

	for (size_t g = 0; g < q->cf->ngroups; g++) {
		size_t start = q->out.len;
		struct sq_ent ent = {.seq = q->next_seq++, .slot = slot, .kind = SQ_GROUP};

		resp_array(&q->out, 6);
		resp_str(&q->out, "XGROUP");
		resp_str(&q->out, "CREATE");
		resp_bulk(&q->out, stream, len);
		resp_str(&q->out, q->cf->groups[g]);
		resp_str(&q->out, "0");
		resp_str(&q->out, "MKSTREAM");
		if (!push_command(q, &ent, start))
			return false;
	}
	return true;
}

bool sq_queue_record(struct sink_queue *q, enum sq_kind k, const char *val, size_t vlen)
{
	size_t start;
	struct sq_ent ent = {.kind = (uint8_t)k};

	if (!sq_close_batch(q))
		return false;
	slot_record_key(&q->key, q->cf->key_prefix, q->cf->slot);
	if (q->key.failed)
		return false;
	start = q->out.len;
	ent.seq = q->next_seq++;
	ent.slot = sq_stream_slot(q->key.data, q->key.len, &q->tag);
	resp_array(&q->out, val ? 3 : 2);
	resp_str(&q->out, val ? "SET" : "GET");
	resp_bulk(&q->out, q->key.data, q->key.len);
	if (val)
		resp_bulk(&q->out, val, vlen);
	return push_command(q, &ent, start);
}

bool sq_queue_trim(struct sink_queue *q, const char *stream, size_t len)
{
	size_t start;
	struct sq_ent ent = {.kind = SQ_TRIM};

	if (!sq_close_batch(q))
		return false;
	start = q->out.len;
	ent.seq = q->next_seq++;
	ent.slot = sq_stream_slot(stream, len, &q->tag);
	resp_array(&q->out, 4);
	resp_str(&q->out, *q->use_functions ? "FCALL" : "EVALSHA");
	resp_str(&q->out, *q->use_functions ? SINK_SCRIPT_TRIM : q->trim_sha);
	resp_str(&q->out, "1");
	resp_bulk(&q->out, stream, len);
	return push_command(q, &ent, start);
}

/* Is f's value large and wholly inside hold's range (sink_redis.h: who owns what)? */
static bool held_value(const struct event_field *f, const struct sink_hold *hold)
{
	uintptr_t v = (uintptr_t)f->value, b = (uintptr_t)hold->base;

	return f->value_len >= SQ_EXT_MIN_BYTES && hold->base && v >= b && v - b <= hold->len &&
	       f->value_len <= hold->len - (v - b);
}

bool sq_has_held_value(const struct event *ev, const struct sink_hold *hold)
{
	for (size_t i = 0; i < ev->nfields; i++)
		if (held_value(&ev->fields[i], hold))
			return true;
	return false;
}

/* Whether id[0..len) is a UUID in PostgreSQL's output form (lowercase, 8-4-4-4-12). */
static bool uuid_canonical(const char *id, size_t len)
{
	if (len != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		unsigned char c = (unsigned char)id[i];

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return false;
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
			return false;
		}
	}
	return true;
}

static unsigned hexval(char c)
{
	return c <= '9' ? (unsigned)(c - '0') : (unsigned)(c - 'a' + 10);
}

/* The bits of a byte in reverse order. */
static unsigned char rev8(unsigned char x)
{
	x = (unsigned char)((x & 0xf0) >> 4 | (x & 0x0f) << 4);
	x = (unsigned char)((x & 0xcc) >> 2 | (x & 0x33) << 2);
	return (unsigned char)((x & 0xaa) >> 1 | (x & 0x55) << 1);
}

/* murmur3's 32-bit finalizer: every bit of x changes about half the bits of the result. */
static uint32_t mix32(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	x *= 0xc2b2ae35u;
	return x ^ x >> 16;
}

/*
 * Append the dedup field of event id[0..len) as a RESP bulk string: 3 bytes
 * of hash, then the id's own bytes, one-to-one with the id (the field the
 * relay sent before issue 21, kept as is, so the function finds ids of
 * buckets written then: it drops the first 3 bytes). The first three bytes
 * are the shard hash (the function reads their bits, first to last, as the
 * hash's bits from the lowest up, so a split can ask Redis for the ids that
 * move: HSCAN MATCH on a prefix): the top 3 bytes of mix32(FNV-1a of the
 * whole id), so every byte of the id moves every bit of the hash, whatever
 * varies in it (UUID version 1 and 6 with a fixed node vary in their time
 * bytes only, version 7 after a timestamp, counters and ULIDs in their last
 * characters). Then:
 * - a UUID in PostgreSQL's form packs to 16 bytes u[0..15], its first four
 *   mixed with its last four: u[3 - i] ^ rev8(u[15 - i]) for i < 4, u[i]
 *   after (the previous releases' shard hash; the function undoes it for
 *   the old layout's key names);
 * - any other id is 4 bytes of FNV-1a of it (high byte first), the id, and
 *   a 0 byte when the id is 12 bytes long or (at least 12 bytes long and)
 *   ends in a 0 byte. So no other id gives 3 + 16 bytes, and the mapping is
 *   one-to-one: two different ids never share a field (an uppercase UUID is
 *   another id, as it always was).
 */
static void put_dedup_field(struct buf *b, const char *id, size_t len)
{
	unsigned char f[3 + 16], *u = f + 3;
	uint32_t fnv = fnv1a32(id, len), h = mix32(fnv);
	bool esc;

	f[0] = (unsigned char)(h >> 24);
	f[1] = (unsigned char)(h >> 16);
	f[2] = (unsigned char)(h >> 8);
	if (uuid_canonical(id, len)) {
		for (size_t i = 0, o = 0; i < 36; i++) {
			if (id[i] == '-')
				continue;
			u[o / 2] = (unsigned char)(o % 2 ? u[o / 2] | hexval(id[i]) : hexval(id[i]) << 4);
			o++;
		}
		unsigned char head[4] = {u[0], u[1], u[2], u[3]};

		for (int i = 0; i < 4; i++)
			u[i] = (unsigned char)(head[3 - i] ^ rev8(u[15 - i]));
		resp_bulk(b, (const char *)f, sizeof(f));
		return;
	}
	esc = len == 12 || (len > 12 && id[len - 1] == '\0');
	buf_putc(b, '$');
	buf_put_u64(b, 3 + 4 + len + esc);
	buf_append(b, "\r\n", 2);
	u[0] = (unsigned char)(fnv >> 24);
	u[1] = (unsigned char)(fnv >> 16);
	u[2] = (unsigned char)(fnv >> 8);
	u[3] = (unsigned char)fnv;
	buf_append(b, (const char *)f, 3 + 4);
	if (len)
		buf_append(b, id, len);
	if (esc)
		buf_putc(b, '\0');
	buf_append(b, "\r\n", 2);
}

bool sq_batch_breaks(const struct sink_queue *q, const struct event *ev, bool dead_letter,
                     bool large)
{
	return q->b_open && (large || dead_letter || q->b_dead || q->b_n >= SQ_BATCH_MAX_EVENTS ||
	                     q->b_args.len >= SQ_BATCH_MAX_BYTES || q->b_stream.len != ev->stream_len ||
	                     memcmp(q->b_stream.data, ev->stream, ev->stream_len) != 0);
}

bool sq_batch_open(struct sink_queue *q, const struct event *ev, bool dead_letter,
                   uint32_t stream_id)
{
	struct sq_lastpos *lp;

	q->b_open = true;
	q->b_dead = dead_letter;
	q->b_seq = q->next_seq++;
	q->b_n = 0;
	q->b_args_count = 0;
	q->b_max_value = 0;
	buf_reset(&q->b_stream);
	buf_append(&q->b_stream, ev->stream, ev->stream_len);
	buf_reset(&q->b_args);
	q->b_commit_us = ev->committed_unix_us;
	q->b_open_us = time_mono_us();
	q->b_waited = false;
	q->b_dead_reason = (uint8_t)ev->dead_reason;
	q->b_stream_id = stream_id;
	/* old-layout dedup key prefix: <prefix>:dedup:{tag}[#<len>:<stream>]: */
	buf_reset(&q->b_prefix);
	if (!stream_key_base(&q->b_prefix, q->cf->key_prefix, "dedup", ev->stream, ev->stream_len, true,
	                     &q->tag))
		return false;
	buf_putc(&q->b_prefix, ':');
	lp = q->republish ? NULL : posmap_find(&q->last_pos, ev->stream, ev->stream_len);
	q->b_prev_seq = lp ? lp->seq : 0;
	if (q->republish)
		memcpy(q->b_expect, "R", 2);
	else
		memcpy(q->b_expect, lp ? lp->pos : "", lp ? sizeof(q->b_expect) : 1);
	return true;
}

bool sq_batch_add(struct sink_queue *q, const struct event *ev, bool dead_letter,
                  struct sink_hold *hold)
{
	bool large = hold != NULL;
	char pos[26];

	/* ARGV: position, dedup field, field count, fields. */
	put_hex(pos, ev->commit_lsn, 16);
	pos[16] = ':';
	put_hex(pos + 17, ev->index, 8);
	pos[25] = '\0';
	memcpy(q->b_last, pos, sizeof(q->b_last));
	resp_bulk(&q->b_args, pos, 25);
	put_dedup_field(&q->b_args, ev->id, ev->id ? ev->id_len : 0);
	resp_u64(&q->b_args, ev->nfields);
	if (large && !(q->b_ext = calloc(1, sizeof(*q->b_ext))))
		return false;
	for (size_t i = 0; i < ev->nfields; i++) {
		const struct event_field *f = &ev->fields[i];
		struct sq_ext *x = q->b_ext;

		resp_bulk(&q->b_args, f->name, f->name_len);
		if (f->value_len > q->b_max_value)
			q->b_max_value = f->value_len;
		if (large && x->nseg < SQ_EXT_MAX_SEGS && held_value(f, hold)) {
			/* Header and trailer here, the value itself from the event's memory. */
			buf_putc(&q->b_args, '$');
			buf_put_u64(&q->b_args, f->value_len);
			buf_append(&q->b_args, "\r\n", 2);
			x->seg[x->nseg].at = q->b_args.len;
			x->seg[x->nseg].p = f->value;
			x->seg[x->nseg].len = f->value_len;
			x->nseg++;
			x->total += f->value_len;
			buf_append(&q->b_args, "\r\n", 2);
		} else {
			resp_bulk(&q->b_args, f->value, f->value_len);
		}
	}
	q->b_args_count += 3 + 2 * ev->nfields;
	q->b_n++;
	q->inflight_events++;
	if (q->b_args.failed || q->b_stream.failed || q->b_prefix.failed)
		return false;
	if (large) {
		/* The call now owns the event's memory; it goes out alone. */
		q->b_ext->hold = hold->p;
		q->b_ext->hold_free = hold->free_fn;
		q->ext_bytes += q->b_ext->total;
		hold->p = NULL;
		return sq_close_batch(q);
	}
	/* Dead letters are rare and each has its own reason: one per call. */
	return dead_letter ? sq_close_batch(q) : true;
}

/* ---- staging ---- */

/*
 * Append the part of p[0..len) that lies in the command's window: *pos is
 * where p starts in the command, *cur the next byte wanted, *left how many
 * more fit.
 */
static void stage_piece(struct buf *dst, const char *p, size_t len, size_t *pos, size_t *cur,
                        size_t *left)
{
	if (*left > 0 && *cur < *pos + len) {
		size_t skip = *cur - *pos, take = len - skip;

		if (take > *left)
			take = *left;
		buf_append(dst, p + skip, take);
		*cur += take;
		*left -= take;
	}
	*pos += len;
}

/*
 * Stage e's bytes from offset from into wbuf until limit: a large command
 * goes out in slices, never copied whole. *part_seq says where the next
 * round resumes (0: e is staged to its end).
 */
static void stage_cmd(const struct sink_queue *q, const struct sq_ent *e, size_t from,
                      struct buf *wbuf, size_t limit, uint64_t *part_seq, size_t *part_off)
{
	const char *base = sq_bytes(q, e);
	size_t nseg = e->ext ? e->ext->nseg : 0, pos = 0, raw = 0, cur = from;
	size_t left = wbuf->len < limit ? limit - wbuf->len : 0;

	for (size_t i = 0; i <= nseg && left > 0; i++) {
		size_t at = i < nseg ? e->ext->seg[i].at : e->len;

		stage_piece(wbuf, base + raw, at - raw, &pos, &cur, &left);
		raw = at;
		if (i < nseg)
			stage_piece(wbuf, e->ext->seg[i].p, e->ext->seg[i].len, &pos, &cur, &left);
	}
	if (cur < sq_cmd_len(e)) {
		*part_seq = e->seq;
		*part_off = cur;
	} else {
		*part_seq = 0;
		*part_off = 0;
	}
}

bool sq_stage(struct sink_queue *q, struct ring *sendq, struct ring *waitq, struct buf *wbuf,
              size_t limit, uint64_t *part_seq, size_t *part_off, bool *staged_publish)
{
	return sq_stage_until(q, sendq, waitq, wbuf, limit, part_seq, part_off, staged_publish, NULL,
	                      NULL);
}

bool sq_stage_entry(struct sink_queue *q, struct sq_ent *e, struct ring *waitq, struct buf *wbuf)
{
	uint64_t part_seq = 0;
	size_t part_off = 0;

	if (!ring_push_u64(waitq, e->seq))
		return false;
	stage_cmd(q, e, 0, wbuf, SIZE_MAX, &part_seq, &part_off);
	return !wbuf->failed && !part_seq;
}

bool sq_stage_until(struct sink_queue *q, struct ring *sendq, struct ring *waitq, struct buf *wbuf,
                    size_t limit, uint64_t *part_seq, size_t *part_off, bool *staged_publish,
                    bool (*stop)(void *ctx, const struct sq_ent *e), void *ctx)
{
	static const char asking[] = "*1\r\n$6\r\nASKING\r\n";

	if (*part_seq) {
		/* Not done before its reply, and the connection it is on is open. */
		const struct sq_ent *e = sq_ent(q, *part_seq);

		if (!e)
			return false;
		stage_cmd(q, e, *part_off, wbuf, limit, part_seq, part_off);
	}
	while (!*part_seq && sendq->len > 0 && wbuf->len < limit) {
		struct sq_ent *e = sq_ent(q, *(const uint64_t *)ring_at(sendq, 0));

		if (e && e->state == SQ_ROUTED && stop && stop(ctx, e))
			break;
		(void)ring_pop_u64(sendq);
		if (!e || e->state != SQ_ROUTED)
			continue; /* re-routed meanwhile */
		if (e->asking) {
			buf_append(wbuf, asking, sizeof(asking) - 1);
			if (!ring_push_u64(waitq, SQ_ASKING_MARK))
				return false;
		}
		if (!ring_push_u64(waitq, e->seq))
			return false;
		stage_cmd(q, e, 0, wbuf, limit, part_seq, part_off);
		if (e->kind != SQ_GROUP && e->kind != SQ_TRIM)
			*staged_publish = true; /* a write that WAIT must cover */
	}
	return !wbuf->failed;
}

/* ---- replies ---- */

/* An executed command: done now, or when the connection's next WAIT succeeds. */
bool sq_executed(struct ring *durable, bool wait_mode, struct sq_ent *e)
{
	if (wait_mode && e->kind != SQ_GROUP) {
		e->state = SQ_EXECUTED;
		return ring_push_u64(durable, e->seq);
	}
	e->state = SQ_DONE;
	return true;
}

enum sq_answer sq_take_reply(struct sink_queue *q, struct ring *waitq, struct ring *durable,
                             bool wait_mode, const redisReply *r, uint64_t *what,
                             struct sq_ent **ret)
{
	struct sq_ent *e;

	*ret = NULL;
	if (waitq->len == 0)
		return SQ_A_UNKNOWN;
	*what = ring_pop_u64(waitq);
	if (*what >= SQ_LOWEST_MARK)
		return SQ_A_MARK;
	e = sq_ent(q, *what);
	if (!e)
		return SQ_A_UNKNOWN;
	*ret = e;
	e->asking = false;
	if (e->kind == SQ_TRIM && !(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) == 0)) {
		e->state = SQ_DONE; /* nothing to make durable, nothing to resend */
		return SQ_A_ANSWERED;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		if (e->kind == SQ_GROUP && strncmp(r->str, "BUSYGROUP", 9) == 0)
			return sq_executed(durable, wait_mode, e) ? SQ_A_EXECUTED : SQ_A_NOMEM;
		return strncmp(r->str, "ASK ", 4) == 0 ? SQ_A_ASK : SQ_A_ERROR;
	}
	if ((e->kind == SQ_RECORD && r->type != REDIS_REPLY_STATUS) ||
	    (e->kind == SQ_GETREC && r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL) ||
	    ((e->kind == SQ_PUBLISH || e->kind == SQ_DEAD) &&
	     (r->type != REDIS_REPLY_ARRAY || r->elements != e->nevents)))
		return SQ_A_MALFORMED;
	if (e->kind == SQ_GETREC)
		return SQ_A_READ; /* a read: nothing for WAIT to make durable */
	return sq_executed(durable, wait_mode, e) ? SQ_A_EXECUTED : SQ_A_NOMEM;
}

void sq_wait_done(struct sink_queue *q, struct ring *durable)
{
	while (durable->len > 0) {
		struct sq_ent *e = sq_ent(q, ring_pop_u64(durable));

		if (e && e->state == SQ_EXECUTED)
			e->state = SQ_DONE;
	}
}
