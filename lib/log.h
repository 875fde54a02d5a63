/*
 * log.h - leveled logging to stderr, text or JSON lines.
 *
 * Only cmd/ and the relay loop log; library modules return errors through
 * their errmsg accessors. The level is checked before any formatting.
 */
#ifndef RELAY_LOG_H
#define RELAY_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON };

extern enum log_level log_current_level;

void log_setup(enum log_level level, enum log_format format);
/* Parse "error|warn|info|debug"; false when unknown. */
bool log_level_parse(const char *s, enum log_level *ret);
bool log_format_parse(const char *s, enum log_format *ret);

/* A key/value pair carried by a log record: a JSON key, or " key=value" in text. */
struct log_kv {
	const char *key;
	const char *value; /* NULL: the pair is left out */
};

/* A pair added to every record from now on (the relay sets "slot"); NULL value clears it. */
void log_set_context(const char *key, const char *value);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_write_kv(enum log_level level, const struct log_kv *kv, size_t nkv, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)                                                                              \
	do {                                                                                           \
		if (log_current_level >= LOG_LEVEL_WARN)                                                   \
			log_write(LOG_LEVEL_WARN, __VA_ARGS__);                                                \
	} while (0)
#define log_info(...)                                                                              \
	do {                                                                                           \
		if (log_current_level >= LOG_LEVEL_INFO)                                                   \
			log_write(LOG_LEVEL_INFO, __VA_ARGS__);                                                \
	} while (0)
#define log_debug(...)                                                                             \
	do {                                                                                           \
		if (log_current_level >= LOG_LEVEL_DEBUG)                                                  \
			log_write(LOG_LEVEL_DEBUG, __VA_ARGS__);                                               \
	} while (0)

#endif
