/*
 * msg.h - building the one-line error messages every lib/ module returns
 * through a caller's buffer.
 */
#ifndef RELAY_MSG_H
#define RELAY_MSG_H

#include <stdbool.h>
#include <stddef.h>

/* Longest piece of user input quoted back in a message. */
#define MSG_QUOTE_MAX 64

/* printf into err[0..errlen); NULL or empty err is a no-op. */
void msg_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Copy s[0..len) into buf for quoting: control bytes become '?' (the message
 * stays one line) and input longer than MSG_QUOTE_MAX is cut with "...".
 * buf should hold MSG_QUOTE_MAX + 8 bytes. Returns buf.
 */
const char *msg_quote(const char *s, size_t len, char *buf, size_t buflen);

/* Write "out of memory" and return false. */
bool msg_oom(char *err, size_t errlen);

#endif
