/*
 * consumer_render.h - one stream entry as one JSON line, for outbox-consume
 * (consumer_render.c). Pure: no I/O, no logging.
 */
#ifndef RELAY_CONSUMER_RENDER_H
#define RELAY_CONSUMER_RENDER_H

#include <stdbool.h>
#include <stddef.h>

/* Keys of every JSON line ahead of the entry's own fields. "entry_id" and not
 * "id": the outbox's own id column arrives as a field named "id". */
#define CONSUMER_KEY_STREAM "stream"
#define CONSUMER_KEY_ENTRY_ID "entry_id"

/* One field of a stream entry; binary-safe, not NUL-terminated. */
struct consumer_field {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

/*
 * True for the fields embedded as JSON when their value parses as one JSON
 * text: "payload" and "headers". Every other field is a JSON string.
 */
bool consumer_is_json_field(const char *name, size_t len);

struct consumer_fmt;

/* NULL when out of memory. */
struct consumer_fmt *consumer_fmt_create(void);
void consumer_fmt_destroy(struct consumer_fmt *f); /* NULL is a no-op */

/*
 * Render one entry as one line:
 *   {"stream":"<stream>","entry_id":"<id>","<name>":<value>,...}\n
 * with the fields in entry order. Values of consumer_is_json_field() fields
 * that are one valid JSON text (nested less deeply than yajl_gen's limit of
 * 128 levels) are embedded, re-encoded compactly with numbers kept digit for
 * digit; any other value, including invalid JSON, is a string. Strings are
 * escaped as JSON requires (quotes, backslashes, control characters as
 * \uXXXX); valid UTF-8 passes through, each byte of an invalid UTF-8
 * sequence becomes U+FFFD. On success *ret_line and *ret_len hold the line
 * including the newline, owned by f and valid until the next call. Returns
 * false only when out of memory.
 */
bool consumer_fmt_line(struct consumer_fmt *f, const char *stream, size_t stream_len,
                       const char *entry_id, size_t entry_id_len,
                       const struct consumer_field *fields, size_t nfields, const char **ret_line,
                       size_t *ret_len);

#endif
