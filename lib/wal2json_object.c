/*
 * wal2json_object.c - w2j_decode_object()'s yajl callbacks: a flat JSON
 * object (a logical message's content) into fields in document order,
 * nested values re-printed compact with yajl_gen.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "wal2json_int.h"

/* --- w2j_decode_object() callbacks ------------------------------------ */

/* yajl_gen print callback: append generated text to the arena. */
void w2j_gen_print(void *ctx, const char *s, size_t len)
{
	struct w2j_decoder *d = ctx;

	if (d->gen_oom || len == 0)
		return;
	if (!w2j_arena_reserve(d, len)) {
		d->gen_oom = true;
		return;
	}
	memcpy(d->arena + d->arena_len, s, len);
	d->arena_len += len;
}

/* Check a yajl_gen result; on failure set the error and return 0. */
static int gen_check(struct w2j_decoder *d, yajl_gen_status st)
{
	if (d->gen_oom)
		return w2j_oom(d);
	switch (st) {
	case yajl_gen_status_ok:
		return 1;
	case yajl_max_depth_exceeded:
		return w2j_fail(d, "message content is nested too deeply");
	default:
		return w2j_fail(d, "could not re-serialize nested JSON (yajl_gen status %d)", (int)st);
	}
}

static struct slot *cur_field(struct w2j_decoder *d)
{
	return &d->slots[d->nslots - 1];
}

static int obj_scalar(struct w2j_decoder *d, enum w2j_kind kind, const void *s, size_t len)
{
	if (d->depth == 0)
		return w2j_fail(d, "message content is not a JSON object");
	return w2j_slot_set_value(d, cur_field(d), kind, s, len);
}

static int obj_null(void *ctx)
{
	struct w2j_decoder *d = ctx;

	if (d->depth >= 2)
		return gen_check(d, yajl_gen_null(d->gen));
	return obj_scalar(d, W2J_KIND_NULL, NULL, 0);
}

static int obj_boolean(void *ctx, int b)
{
	struct w2j_decoder *d = ctx;

	if (d->depth >= 2)
		return gen_check(d, yajl_gen_bool(d->gen, b));
	return b ? obj_scalar(d, W2J_KIND_BOOL, "true", 4) : obj_scalar(d, W2J_KIND_BOOL, "false", 5);
}

static int obj_number(void *ctx, const char *s, size_t len)
{
	struct w2j_decoder *d = ctx;

	if (d->depth >= 2)
		return gen_check(d, yajl_gen_number(d->gen, s, len));
	return obj_scalar(d, W2J_KIND_NUMBER, s, len);
}

static int obj_string(void *ctx, const unsigned char *s, size_t len)
{
	struct w2j_decoder *d = ctx;

	if (d->depth >= 2)
		return gen_check(d, yajl_gen_string(d->gen, s, len));
	return obj_scalar(d, W2J_KIND_STRING, s, len);
}

static int obj_open(struct w2j_decoder *d, bool is_array)
{
	yajl_gen_status st;

	if (d->depth == 0) {
		if (is_array)
			return w2j_fail(d, "message content is not a JSON object");
		d->depth = 1;
		return 1;
	}
	if (d->depth == 1) {
		/* a nested value of a top-level key: regenerate it compactly */
		yajl_gen_reset(d->gen, NULL);
		d->gen_start = d->arena_len;
	}
	st = is_array ? yajl_gen_array_open(d->gen) : yajl_gen_map_open(d->gen);
	d->depth++;
	return gen_check(d, st);
}

static int obj_start_map(void *ctx)
{
	return obj_open(ctx, false);
}

static int obj_start_array(void *ctx)
{
	return obj_open(ctx, true);
}

static int obj_close(struct w2j_decoder *d, bool is_array)
{
	struct slot *f;

	d->depth--;
	if (d->depth == 0)
		return 1;
	if (!gen_check(d, is_array ? yajl_gen_array_close(d->gen) : yajl_gen_map_close(d->gen)))
		return 0;
	if (d->depth > 1)
		return 1;
	/* the nested value is complete: it spans gen_start..arena_len */
	if (!w2j_arena_reserve(d, 1))
		return 0;
	f = cur_field(d);
	f->kind = W2J_KIND_JSON;
	f->has_value = true;
	f->value.off = d->gen_start;
	f->value.len = d->arena_len - d->gen_start;
	d->arena[d->arena_len++] = '\0';
	return 1;
}

static int obj_end_map(void *ctx)
{
	return obj_close(ctx, false);
}

static int obj_end_array(void *ctx)
{
	return obj_close(ctx, true);
}

static int obj_map_key(void *ctx, const unsigned char *k, size_t len)
{
	struct w2j_decoder *d = ctx;
	struct slot *f;

	if (d->depth >= 2)
		return gen_check(d, yajl_gen_string(d->gen, k, len));
	f = w2j_slot_new(d);
	if (!f)
		return 0;
	f->has_name = true;
	return w2j_arena_put(d, k, len, &f->name);
}

const yajl_callbacks w2j_object_callbacks = {
    .yajl_null = obj_null,
    .yajl_boolean = obj_boolean,
    .yajl_number = obj_number,
    .yajl_string = obj_string,
    .yajl_start_map = obj_start_map,
    .yajl_map_key = obj_map_key,
    .yajl_end_map = obj_end_map,
    .yajl_start_array = obj_start_array,
    .yajl_end_array = obj_end_array,
};
