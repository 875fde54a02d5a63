/*
 * lsn.c - WAL position parsing/formatting and protocol time helpers.
 */
#include "lsn.h"

#include "buf.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* Seconds between 1970-01-01 and 2000-01-01, the PostgreSQL epoch. */
#define PG_EPOCH_OFFSET_US INT64_C(946684800000000)

/* Parse 1..8 hex digits from s[*pos..end) into *out, stopping at stop. */
static bool parse_half(const char *s, size_t *pos, size_t end, char stop, uint32_t *out)
{
	uint32_t v = 0;
	size_t start = *pos;

	while (*pos < end && s[*pos] != stop) {
		int h = hex_value(s[*pos]);

		if (h < 0 || *pos - start >= 8)
			return false;
		v = (v << 4) | (uint32_t)h;
		(*pos)++;
	}
	if (*pos == start)
		return false;
	*out = v;
	return true;
}

bool lsn_parse(const char *s, size_t len, lsn_t *ret)
{
	size_t pos = 0;
	uint32_t hi, lo;

	if (!s)
		return false;
	if (!parse_half(s, &pos, len, '/', &hi) || pos >= len || s[pos] != '/')
		return false;
	pos++;
	if (!parse_half(s, &pos, len, '\0', &lo) || pos != len)
		return false;
	*ret = ((lsn_t)hi << 32) | lo;
	return true;
}

/* v in uppercase hex without leading zeros at o; returns the byte after it. */
static char *put_hex32(char *o, uint32_t v)
{
	int shift = 28;

	while (shift > 0 && !(v >> shift))
		shift -= 4;
	for (; shift >= 0; shift -= 4)
		*o++ = "0123456789ABCDEF"[(v >> shift) & 0xf];
	return o;
}

/* "%X/%X" without printf: it runs once per event (the _lsn field). */
char *lsn_format(lsn_t lsn, char buf[LSN_STRLEN])
{
	char *o = put_hex32(buf, (uint32_t)(lsn >> 32));

	*o++ = '/';
	o = put_hex32(o, (uint32_t)lsn);
	*o = '\0';
	return buf;
}

int64_t time_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t time_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t time_unix_to_pg(int64_t unix_us)
{
	return unix_us - PG_EPOCH_OFFSET_US;
}

void put_be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (unsigned char)(v & 0xff);
		v >>= 8;
	}
}

uint64_t get_be64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Read exactly n decimal digits at s[*pos]. */
static bool digits(const char *s, size_t len, size_t *pos, int n, int *out)
{
	int v = 0;

	if (*pos + (size_t)n > len)
		return false;
	for (int i = 0; i < n; i++) {
		char c = s[*pos + (size_t)i];

		if (c < '0' || c > '9')
			return false;
		v = v * 10 + (c - '0');
	}
	*pos += (size_t)n;
	*out = v;
	return true;
}

bool time_parse_pg(const char *s, size_t len, int64_t *ret_unix_us)
{
	struct tm tm = {0};
	size_t pos = 0;
	int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, oh = 0, om = 0, sign;
	int64_t frac = 0, scale = 1000000, t;

	if (!s || !digits(s, len, &pos, 4, &y) || pos >= len || s[pos++] != '-' ||
	    !digits(s, len, &pos, 2, &mo) || pos >= len || s[pos++] != '-' ||
	    !digits(s, len, &pos, 2, &d) || pos >= len || (s[pos] != ' ' && s[pos] != 'T') ||
	    (pos++, !digits(s, len, &pos, 2, &h)) || pos >= len || s[pos++] != ':' ||
	    !digits(s, len, &pos, 2, &mi) || pos >= len || s[pos++] != ':' ||
	    !digits(s, len, &pos, 2, &sec))
		return false;
	if (pos < len && s[pos] == '.') {
		pos++;
		while (pos < len && s[pos] >= '0' && s[pos] <= '9') {
			if (scale > 1) {
				scale /= 10;
				frac += (s[pos] - '0') * scale;
			}
			pos++;
		}
	}
	if (pos >= len || (s[pos] != '+' && s[pos] != '-'))
		return false;
	sign = s[pos++] == '-' ? -1 : 1;
	if (!digits(s, len, &pos, 2, &oh))
		return false;
	if (pos < len && s[pos] == ':')
		pos++;
	if (pos < len && !digits(s, len, &pos, 2, &om))
		return false;
	if (pos != len)
		return false;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = (int64_t)timegm(&tm);
	t -= sign * (oh * 3600 + om * 60);
	*ret_unix_us = t * 1000000 + frac;
	return true;
}

const char *time_format_iso(int64_t us, char *buf, size_t len)
{
	time_t sec = (time_t)(us / 1000000);
	struct tm tm;

	if (us <= 0 || !gmtime_r(&sec, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		return NULL;
	snprintf(buf + strlen(buf), len - strlen(buf), ".%06dZ", (int)(us % 1000000));
	return buf;
}
