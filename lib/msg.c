/*
 * msg.c - one-line error messages into caller buffers (see msg.h).
 */
#include "msg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void msg_set(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

const char *msg_quote(const char *s, size_t len, char *buf, size_t buflen)
{
	size_t n = 0;

	if (buflen == 0)
		return buf;
	for (size_t i = 0; i < len && n + 4 < buflen; i++) {
		unsigned char c = (unsigned char)s[i];

		if (n >= MSG_QUOTE_MAX) {
			memcpy(buf + n, "...", 3);
			n += 3;
			break;
		}
		buf[n++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	buf[n] = '\0';
	return buf;
}

bool msg_oom(char *err, size_t errlen)
{
	msg_set(err, errlen, "out of memory");
	return false;
}
