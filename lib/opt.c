/*
 * opt.c - the option engine (see opt.h): one table type, one parser per
 * value kind, flags and environment variables, --help from the same rows.
 *
 * Loading happens in two passes. The first collects raw strings: the last
 * value given on the command line and the environment value, per row. The
 * second converts, for each row, only the value that wins (flag >
 * environment > default), so a broken environment variable that a flag
 * overrides is never an error. Rows that may hold a password (OPT_F_SECRET)
 * are never quoted back, and their argv copies are overwritten at the end.
 */
#include "msg.h"
#include "opt.h"

#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "lsn.h"
#include "redis_url.h"

/* Longest user value quoted back in an error message, in bytes. */
#define QUOTE_MAX MSG_QUOTE_MAX
/* Column where the environment variable starts in --help. */
#define USAGE_ENV_COL 32
#define USAGE_WIDTH 80
#define USAGE_INDENT 6
#define NBSP '\x01'
#define ENV_MAX 96

/* Raw strings collected in the first pass; all borrowed from argv/envp. */
struct raw_value {
	const char *arg;   /* last command-line value, NULL when not given */
	char *secret;      /* OPT_F_SECRET: arg as a writable part of argv, scrubbed after loading */
	const char *env;   /* environment value, NULL when not set */
	const char **list; /* OPT_LIST: every command-line value, in order */
	size_t nlist;
};

/* One load: the spec, the struct being filled, the raw values per row. */
struct load {
	const struct opt_spec *spec;
	void *cf;
	struct raw_value *raw;
	char *err;
	size_t errlen;
};

/* Where a value came from, for error messages. */
struct source {
	bool env;
	char label[ENV_MAX]; /* "--slot" or "OUTBOX_RELAY_SLOT" */
};

/* See opt.h. */
void opt_env_name(const struct opt_spec *spec, const struct opt_def *o, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "%s%s", spec->env_prefix, o->name);

	for (size_t i = strlen(spec->env_prefix); i < n && i < len; i++)
		buf[i] = buf[i] == '-' ? '_' : (char)toupper((unsigned char)buf[i]);
}

static struct source source_of(const struct load *ld, const struct opt_def *o, bool env)
{
	struct source src;

	src.env = env;
	if (env)
		opt_env_name(ld->spec, o, src.label, sizeof(src.label));
	else
		(void)snprintf(src.label, sizeof(src.label), "--%s", o->name);
	return src;
}

/*
 * `invalid value "V" for --x: why` (or `in OUTBOX_RELAY_X`); for secret
 * options `invalid --x: why`, without the value.
 */
static bool bad_value(const struct load *ld, const struct opt_def *o, const struct source *src,
                      const char *value, const char *why)
{
	char q[QUOTE_MAX + 8];

	if (o->flags & OPT_F_SECRET)
		msg_set(ld->err, ld->errlen, "invalid %s: %s", src->label, why);
	else
		msg_set(ld->err, ld->errlen, "invalid value \"%s\" %s %s: %s",
		        msg_quote(value, strlen(value), q, sizeof(q)), src->env ? "in" : "for", src->label,
		        why);
	return false;
}

/* Write a duration in ms with the largest unit that divides it ("90s", "1h"). */
static void format_duration(int64_t ms, char *buf, size_t len)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"d", OPT_MS_DAY}, {"h", OPT_MS_HOUR}, {"m", OPT_MS_MINUTE}, {"s", OPT_MS_SECOND}};

	if (ms == 0) {
		(void)snprintf(buf, len, "0");
		return;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ms % units[i].ms == 0) {
			(void)snprintf(buf, len, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
			return;
		}
	}
	(void)snprintf(buf, len, "%lldms", (long long)ms);
}

/* Write a byte count with the largest binary unit that divides it ("64MiB"). */
static void format_size(int64_t bytes, char *buf, size_t len)
{
	if (bytes != 0 && bytes % OPT_GIB == 0)
		(void)snprintf(buf, len, "%lldGiB", (long long)(bytes / OPT_GIB));
	else if (bytes != 0 && bytes % OPT_MIB == 0)
		(void)snprintf(buf, len, "%lldMiB", (long long)(bytes / OPT_MIB));
	else if (bytes != 0 && bytes % OPT_KIB == 0)
		(void)snprintf(buf, len, "%lldKiB", (long long)(bytes / OPT_KIB));
	else
		(void)snprintf(buf, len, "%lld", (long long)bytes);
}

static void format_bound(const struct opt_def *o, int64_t v, char *buf, size_t len)
{
	if (o->kind == OPT_DURATION)
		format_duration(v, buf, len);
	else if (o->kind == OPT_SIZE)
		format_size(v, buf, len);
	else
		(void)snprintf(buf, len, "%lld", (long long)v);
}

static bool out_of_range(const struct load *ld, const struct opt_def *o, const struct source *src,
                         const char *value)
{
	char lo[32], hi[32], why[96];

	format_bound(o, o->min, lo, sizeof(lo));
	format_bound(o, o->max, hi, sizeof(hi));
	(void)snprintf(why, sizeof(why), "must be between %s and %s", lo, hi);
	return bad_value(ld, o, src, value, why);
}

enum num_result { NUM_OK, NUM_JUNK, NUM_RANGE };

/* A suffix such as "ms" or "MiB" and what it multiplies by. */
struct unit {
	const char *suffix;
	int64_t mult;
};

/*
 * Parse s as digits followed by a unit from units[] (matched exactly, or
 * case-insensitively when nocase). A bare number uses bare_mult. Signs,
 * spaces and fractions are junk; results above INT64_MAX are NUM_RANGE.
 * *ret is written only on NUM_OK.
 */
static enum num_result parse_scaled(const char *s, const struct unit *units, size_t nunits,
                                    bool nocase, int64_t bare_mult, int64_t *ret)
{
	int64_t v = 0, mult = 0;
	bool overflow = false;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*p))
		return NUM_JUNK;
	for (; isdigit((unsigned char)*p); p++) {
		int d = *p - '0';

		if (v > (INT64_MAX - d) / 10)
			overflow = true;
		else
			v = v * 10 + d;
	}
	if (*p == '\0') {
		mult = bare_mult;
	} else {
		for (size_t i = 0; i < nunits; i++) {
			if (nocase ? strcasecmp(p, units[i].suffix) == 0 : strcmp(p, units[i].suffix) == 0) {
				mult = units[i].mult;
				break;
			}
		}
		if (mult == 0)
			return NUM_JUNK;
	}
	if (overflow || v > INT64_MAX / mult)
		return NUM_RANGE;
	*ret = v * mult;
	return NUM_OK;
}

static const struct unit duration_units[] = {
    {"ms", 1}, {"s", OPT_MS_SECOND}, {"m", OPT_MS_MINUTE}, {"h", OPT_MS_HOUR}, {"d", OPT_MS_DAY},
};

static const struct unit size_units[] = {
    {"k", OPT_KIB},   {"kb", OPT_KIB}, {"kib", OPT_KIB}, {"m", OPT_MIB},   {"mb", OPT_MIB},
    {"mib", OPT_MIB}, {"g", OPT_GIB},  {"gb", OPT_GIB},  {"gib", OPT_GIB},
};

static enum num_result parse_duration(const char *s, int64_t *ret_ms)
{
	return parse_scaled(s, duration_units, sizeof(duration_units) / sizeof(duration_units[0]),
	                    false, OPT_MS_SECOND, ret_ms);
}

static enum num_result parse_size(const char *s, int64_t *ret_bytes)
{
	return parse_scaled(s, size_units, sizeof(size_units) / sizeof(size_units[0]), true, 1,
	                    ret_bytes);
}

/* See opt.h. */
bool opt_parse_duration_ms(const char *s, int64_t *ret_ms)
{
	return parse_duration(s, ret_ms) == NUM_OK;
}

/* Parse an optionally signed decimal integer; the whole string must be used. */
static enum num_result parse_int(const char *s, int64_t *ret)
{
	bool neg = false;
	int64_t v = 0;
	const char *p = s;

	if (*p == '-' || *p == '+')
		neg = *p++ == '-';
	if (!isdigit((unsigned char)*p))
		return NUM_JUNK;
	for (; isdigit((unsigned char)*p); p++) {
		int d = *p - '0';

		/* Accumulate negatively so INT64_MIN still fits. */
		if (v < (INT64_MIN + d) / 10)
			return strspn(p, "0123456789") == strlen(p) ? NUM_RANGE : NUM_JUNK;
		v = v * 10 - d;
	}
	if (*p != '\0')
		return NUM_JUNK;
	if (!neg && v == INT64_MIN)
		return NUM_RANGE;
	*ret = neg ? v : -v;
	return NUM_OK;
}

bool opt_parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = {"true", "1", "yes", "on"};
	static const char *const no[] = {"false", "0", "no", "off"};

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return true;
		}
	}
	return false;
}

static void *field_ptr(void *cf, size_t offset)
{
	return (char *)cf + offset;
}

/* Store v into the int or int64_t field of o. */
static bool store_int(void *cf, const struct opt_def *o, int64_t v)
{
	void *p = field_ptr(cf, o->offset);

	if (o->size == sizeof(int64_t)) {
		memcpy(p, &v, sizeof(v));
		return true;
	}
	if (o->size == sizeof(int) && v >= INT_MIN && v <= INT_MAX) {
		int iv = (int)v;

		memcpy(p, &iv, sizeof(iv));
		return true;
	}
	return false;
}

/* The row called name (not a section title), or NULL. */
static const struct opt_def *row_named(const struct opt_spec *spec, const char *name, size_t len)
{
	for (size_t i = 0; i < spec->nrows; i++) {
		const struct opt_def *o = &spec->rows[i];

		if (o->kind != OPT_GROUP && strlen(o->name) == len && memcmp(o->name, name, len) == 0)
			return o;
	}
	return NULL;
}

/* Whether o is an option of the command loading (OPT_F_ONLY rows are not everyone's). */
static bool accepts(const struct opt_spec *spec, const struct opt_def *o)
{
	return o->kind != OPT_GROUP && (!(o->flags & OPT_F_ONLY) || (o->cmds & spec->cmd));
}

/* The option called name that spec->cmd accepts, or NULL. */
static const struct opt_def *find_option(const struct opt_spec *spec, const char *name, size_t len)
{
	const struct opt_def *o = row_named(spec, name, len);

	return o && accepts(spec, o) ? o : NULL;
}

/* ---- Conversion of one winning value ---- */

static bool apply_string(struct load *ld, const struct opt_def *o, const char *v,
                         const struct source *src)
{
	char why[256];
	char **field = field_ptr(ld->cf, o->offset);
	char *copy;

	if ((o->flags & OPT_F_EMPTY_UNSET) && !*v)
		return true; /* "" unsets, as an empty variable in a manifest does */
	if ((o->flags & OPT_F_NONEMPTY) && !*v)
		return bad_value(ld, o, src, v, "must not be empty");
	if (o->check && !o->check(v, why, sizeof(why)))
		return bad_value(ld, o, src, v, why);
	if ((o->flags & OPT_F_QUALIFY) && !strchr(v, '.')) {
		size_t len = strlen("public.") + strlen(v) + 1;

		copy = malloc(len);
		if (copy)
			(void)snprintf(copy, len, "public.%s", v);
	} else {
		copy = strdup(v);
	}
	if (!copy)
		return msg_oom(ld->err, ld->errlen);
	*field = copy;
	return true;
}

static bool apply_redis_url(struct load *ld, const struct opt_def *o, const char *v,
                            const struct source *src)
{
	char why[256];
	char **field = field_ptr(ld->cf, o->offset);
	struct redis_target *target = field_ptr(ld->cf, o->aux_offset);

	if (!redis_url_parse(v, target, why, sizeof(why)))
		return bad_value(ld, o, src, v, why);
	*field = strdup(v);
	return *field ? true : msg_oom(ld->err, ld->errlen);
}

/*
 * An OPT_F_LEGACY_MS value: a bare number is milliseconds, as it was under
 * this name, with a warning that names the new spelling. NUM_JUNK when v is
 * not a bare number (the caller parses it as any duration).
 */
static enum num_result legacy_ms(struct load *ld, const struct opt_def *o, const char *v,
                                 const struct source *src, int64_t *ret)
{
	enum num_result r = parse_scaled(v, NULL, 0, false, 1, ret);
	const struct opt_def *n = row_named(ld->spec, o->alias, strlen(o->alias));
	char line[512], q[QUOTE_MAX + 8];
	struct source now;

	if (r != NUM_OK || *ret == 0 || !ld->spec->warn || !n)
		return r;
	now = source_of(ld, n, src->env);
	msg_quote(v, strlen(v), q, sizeof(q));
	msg_set(line, sizeof(line),
	        "%s%s%s: a bare number here still means milliseconds (durations elsewhere "
	        "take seconds); %s is deprecated: write %s%s%sms",
	        src->label, src->env ? "=" : " ", q, src->label, now.label, src->env ? "=" : " ", q);
	ld->spec->warn(ld->cf, line);
	return r;
}

static bool apply_number(struct load *ld, const struct opt_def *o, const char *v,
                         const struct source *src)
{
	enum num_result r = NUM_JUNK;
	int64_t n = 0, ignored;

	switch (o->kind) {
	case OPT_DURATION:
		if (o->flags & OPT_F_LEGACY_MS)
			r = legacy_ms(ld, o, v, src, &n);
		if (r == NUM_JUNK)
			r = parse_duration(v, &n);
		/* "-5s" is a well-formed duration out of range, not junk. */
		if (r == NUM_JUNK && v[0] == '-' && parse_duration(v + 1, &ignored) != NUM_JUNK)
			r = NUM_RANGE;
		if (r == NUM_JUNK)
			return bad_value(ld, o, src, v,
			                 (o->flags & OPT_F_LEGACY_MS)
			                     ? "expected a duration such as 500ms, 90s or 1h (a bare number "
			                       "means milliseconds under this old name; units ms, s, m, h, d)"
			                     : "expected a duration such as 3600, 90s or 1h (a bare number "
			                       "means seconds; units ms, s, m, h, d)");
		break;
	case OPT_SIZE:
		r = parse_size(v, &n);
		if (r == NUM_JUNK && v[0] == '-' && parse_size(v + 1, &ignored) != NUM_JUNK)
			r = NUM_RANGE;
		if (r == NUM_JUNK)
			return bad_value(ld, o, src, v,
			                 "expected a size such as 1048576, 512KiB, 64MiB or 1GiB");
		break;
	default:
		r = parse_int(v, &n);
		if (r == NUM_JUNK)
			return bad_value(ld, o, src, v, "expected a whole number");
		break;
	}
	if (r == NUM_RANGE || n < o->min || n > o->max)
		return out_of_range(ld, o, src, v);
	if (o->flags & OPT_F_SECONDS) {
		if (n % OPT_MS_SECOND != 0)
			return bad_value(ld, o, src, v,
			                 "must be a whole number of seconds, such as 90s or 3600");
		n /= OPT_MS_SECOND;
	}
	if (!store_int(ld->cf, o, n)) {
		msg_set(ld->err, ld->errlen, "internal error: --%s does not fit its field", o->name);
		return false;
	}
	return true;
}

/* Append a copy of item[0..len) to the list field of o; repeats refused unless OPT_F_DEDUP. */
static bool list_append(struct load *ld, const struct opt_def *o, const char *item, size_t len,
                        const char *whole, const struct source *src)
{
	char ***items = field_ptr(ld->cf, o->offset);
	size_t *count = field_ptr(ld->cf, o->aux_offset);

	if (len == 0)
		return bad_value(ld, o, src, whole,
		                 src->env ? "names in the list must not be empty" : "must not be empty");
	for (size_t i = 0; i < *count; i++) {
		if (strlen((*items)[i]) == len && memcmp((*items)[i], item, len) == 0) {
			char why[QUOTE_MAX + 48], q[QUOTE_MAX + 8];

			if (o->flags & OPT_F_DEDUP)
				return true;
			(void)snprintf(why, sizeof(why), "\"%s\" is listed twice",
			               msg_quote((*items)[i], strlen((*items)[i]), q, sizeof(q)));
			return bad_value(ld, o, src, whole, why);
		}
	}
	return opt_strv_push(items, count, item, len) || msg_oom(ld->err, ld->errlen);
}

/* See opt.h. */
bool opt_strv_push(char ***items, size_t *count, const char *item, size_t len)
{
	char **grown;
	char *copy = strndup(item, len);

	if (!copy)
		return false;
	grown = realloc(*items, (*count + 1) * sizeof(**items));
	if (!grown) {
		free(copy);
		return false;
	}
	grown[*count] = copy;
	*items = grown;
	(*count)++;
	return true;
}

/* See opt.h. */
bool opt_list_next(const char **cursor, const char **item, size_t *len)
{
	const char *p = *cursor, *comma, *end;

	if (!p)
		return false;
	comma = strchr(p, ',');
	end = comma ? comma : p + strlen(p);
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	*item = p;
	*len = (size_t)(end - p);
	*cursor = comma ? comma + 1 : NULL;
	return true;
}

/*
 * OPT_LIST: every command-line occurrence, else the environment's
 * comma-separated list (blanks around names are ignored; "" means none),
 * else the default (same syntax as the environment).
 */
static bool apply_list(struct load *ld, const struct opt_def *o, const struct raw_value *raw)
{
	struct source src;
	const char *list;
	size_t len;

	if (raw->nlist > 0) {
		src = source_of(ld, o, false);
		for (size_t i = 0; i < raw->nlist; i++) {
			if (!list_append(ld, o, raw->list[i], strlen(raw->list[i]), raw->list[i], &src))
				return false;
		}
		return true;
	}
	src = source_of(ld, o, raw->env != NULL);
	list = raw->env ? raw->env : o->defval;
	if (!list || list[strspn(list, " \t")] == '\0')
		return true;
	for (const char *cursor = list, *item; opt_list_next(&cursor, &item, &len);)
		if (!list_append(ld, o, item, len, list, &src))
			return false;
	return true;
}

/*
 * The value of o that wins (flag > environment > default) and whether it
 * came from the environment; NULL when none. An OPT_F_LEGACY_MS row yields
 * its own value only where the new row has none from the same or a stronger
 * source, and never its default.
 */
static const char *winning_value(const struct load *ld, const struct opt_def *o, bool *from_env)
{
	const struct raw_value *raw = &ld->raw[o - ld->spec->rows];

	*from_env = !raw->arg && raw->env;
	if (o->flags & OPT_F_LEGACY_MS) {
		const struct opt_def *n = row_named(ld->spec, o->alias, strlen(o->alias));
		const struct raw_value *nr = n ? &ld->raw[n - ld->spec->rows] : NULL;

		if (!nr || nr->arg || (!raw->arg && nr->env))
			return NULL;
		return raw->arg ? raw->arg : raw->env;
	}
	return raw->arg ? raw->arg : raw->env ? raw->env : o->defval;
}

/* Convert the winning value of o into the caller's struct. */
static bool apply_option(struct load *ld, const struct opt_def *o)
{
	struct source src;
	const char *v;
	bool from_env;
	char env[ENV_MAX];

	if (o->kind == OPT_LIST)
		return apply_list(ld, o, &ld->raw[o - ld->spec->rows]);
	v = winning_value(ld, o, &from_env);
	src = source_of(ld, o, from_env);
	if ((o->flags & OPT_F_REQUIRED) && (!v || !*v)) {
		opt_env_name(ld->spec, o, env, sizeof(env));
		msg_set(ld->err, ld->errlen, "missing --%s (or %s): %s", o->name, env, o->alias);
		return false;
	}
	if (!v)
		return true; /* no default: the zeroed field means "unset" */

	switch (o->kind) {
	case OPT_STRING:
		return apply_string(ld, o, v, &src);
	case OPT_REDIS_URL:
		return apply_redis_url(ld, o, v, &src);
	case OPT_DURATION:
	case OPT_INT:
	case OPT_SIZE:
		return apply_number(ld, o, v, &src);
	case OPT_BOOL: {
		bool b;

		if (!opt_parse_bool(v, &b))
			return bad_value(ld, o, &src, v, "expected true or false (or 1/0, yes/no, on/off)");
		memcpy(field_ptr(ld->cf, o->offset), &b, sizeof(b));
		return true;
	}
	case OPT_LSN: {
		lsn_t lsn;

		if (!lsn_parse(v, strlen(v), &lsn))
			return bad_value(
			    ld, o, &src, v,
			    "expected an LSN such as 0/16B3748, as pg_current_wal_lsn() prints it");
		memcpy(field_ptr(ld->cf, o->offset), &lsn, sizeof(lsn));
		return true;
	}
	case OPT_LOG_LEVEL: {
		enum log_level level;

		if (!log_level_parse(v, &level))
			return bad_value(ld, o, &src, v, "expected error, warn, info or debug");
		memcpy(field_ptr(ld->cf, o->offset), &level, sizeof(level));
		return true;
	}
	case OPT_LOG_FORMAT: {
		enum log_format format;

		if (!log_format_parse(v, &format))
			return bad_value(ld, o, &src, v, "expected text or json");
		memcpy(field_ptr(ld->cf, o->offset), &format, sizeof(format));
		return true;
	}
	case OPT_GROUP:
	case OPT_LIST:
		break;
	}
	msg_set(ld->err, ld->errlen, "internal error: --%s has an unknown kind", o->name);
	return false;
}

/* ---- First pass: collect raw strings ---- */

static bool is_bool_word(const char *s)
{
	bool ignored;

	return opt_parse_bool(s, &ignored);
}

/*
 * `unexpected argument "X"`. prev is the option of the argument before
 * (flag or its value), bare_bool whether that was a bool flag without a
 * value. X is not quoted when it may be the tail of an unquoted connection
 * string or URL ("--pg-dsn host=db password=x"), or a secret value's.
 */
static void positional_error(const struct load *ld, const char *a, int i,
                             const struct opt_def *prev, bool bare_bool)
{
	const char *prog = ld->spec->prog;
	char q[QUOTE_MAX + 8];

	if (bare_bool && is_bool_word(a)) {
		msg_set(ld->err, ld->errlen,
		        "unexpected argument \"%s\" after --%s: write --%s=%s, or --no-%s for false",
		        msg_quote(a, strlen(a), q, sizeof(q)), prev->name, prev->name, a, prev->name);
	} else if ((prev && (prev->flags & OPT_F_SECRET)) || strpbrk(a, "=@:")) {
		msg_set(ld->err, ld->errlen,
		        "unexpected argument #%d (not shown: it may hold a secret); %s takes no "
		        "positional arguments, so quote values that contain spaces",
		        i, prog);
	} else {
		msg_set(ld->err, ld->errlen,
		        "unexpected argument \"%s\"; %s takes no positional arguments, run %s --help "
		        "for the options",
		        msg_quote(a, strlen(a), q, sizeof(q)), prog, prog);
	}
}

/* Take a secret value out of argv: all of it for a password, else its password parts. */
static void scrub_raw(const struct opt_def *o, char *value)
{
	if (value && (o->flags & OPT_F_PASSWORD)) {
		size_t n = strlen(value);

		memset(value, '*', n < 3 ? n : 3);
		if (n > 3)
			memset(value + 3, 0, n - 3);
	} else {
		opt_scrub_secret(value);
	}
}

/*
 * Record value for o from the command line; writable is the same string in
 * argv. A secret option given again scrubs the value it replaces at once:
 * nothing reads it any more.
 */
static bool record_arg(struct load *ld, const struct opt_def *o, const char *value, char *writable,
                       int argc)
{
	struct raw_value *r = &ld->raw[o - ld->spec->rows];

	if (o->flags & OPT_F_SECRET) {
		scrub_raw(o, r->secret);
		r->secret = writable;
	}
	if (o->kind != OPT_LIST) {
		r->arg = value;
		return true;
	}
	if (!r->list) {
		/* Never more occurrences than arguments. */
		r->list = calloc((size_t)argc, sizeof(*r->list));
		if (!r->list)
			return msg_oom(ld->err, ld->errlen);
	}
	r->list[r->nlist++] = value;
	return true;
}

/* The row of argument a ("--name", "--name=value", "--no-name"), or NULL with err set. */
static const struct opt_def *lookup_arg(struct load *ld, const char *a, bool *negated)
{
	/* The name only: "--pg-dsnn=host=... password=..." must not leak. */
	const char *name = a[1] == '-' ? a + 2 : a + 1, *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	const struct opt_def *o = a[1] == '-' ? find_option(ld->spec, name, len) : NULL;
	char shown[QUOTE_MAX + 8], q[QUOTE_MAX + 8];

	*negated = false;
	if (!o && a[1] == '-' && len > 3 && strncmp(name, "no-", 3) == 0) {
		o = find_option(ld->spec, name + 3, len - 3);
		if (o && o->kind == OPT_BOOL)
			*negated = true;
		else
			o = NULL;
	}
	if (o)
		return o;
	(void)snprintf(shown, sizeof(shown), "%.*s", (int)(name - a + len), a);
	if (eq && (strcmp(shown, "--help") == 0 || strcmp(shown, "--version") == 0))
		msg_set(ld->err, ld->errlen, "option %s does not take a value", shown);
	else
		msg_set(ld->err, ld->errlen, "unknown option \"%s\"; run %s --help for the list",
		        msg_quote(shown, strlen(shown), q, sizeof(q)), ld->spec->prog);
	return NULL;
}

static enum opt_result scan_argv(struct load *ld, int argc, char **argv)
{
	/* The option of the previous argument, for positional_error(). */
	const struct opt_def *prev = NULL;
	bool prev_bare_bool = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq, *value;
		const struct opt_def *o;
		bool negated;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			ld->spec->usage(stdout);
			return OPT_HELP;
		}
		if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
			ld->spec->version(stdout);
			return OPT_VERSION;
		}
		if (strcmp(a, "--") == 0) {
			if (i + 1 < argc) {
				positional_error(ld, argv[i + 1], i + 1, NULL, false);
				return OPT_ERROR;
			}
			break;
		}
		if (a[0] != '-' || a[1] == '\0') {
			positional_error(ld, a, i, prev, prev_bare_bool);
			return OPT_ERROR;
		}
		o = lookup_arg(ld, a, &negated);
		if (!o)
			return OPT_ERROR;
		eq = strchr(a, '=');
		if (negated) {
			if (eq) {
				msg_set(ld->err, ld->errlen,
				        "option --no-%s does not take a value; use --%s=VALUE instead", o->name,
				        o->name);
				return OPT_ERROR;
			}
			value = "false";
		} else if (eq) {
			value = eq + 1;
		} else if (o->kind == OPT_BOOL) {
			value = "true";
		} else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
			value = argv[++i];
		} else {
			msg_set(ld->err, ld->errlen, "option --%s needs a value", o->name);
			return OPT_ERROR;
		}
		/* value is argv[i] or its part after '=' (secret options are never bools). */
		if (!record_arg(ld, o, value,
		                (o->flags & OPT_F_SECRET) ? argv[i] + (value - argv[i]) : NULL, argc))
			return OPT_ERROR;
		prev = o;
		prev_bare_bool = o->kind == OPT_BOOL && !eq && !negated;
	}
	return OPT_OK;
}

/*
 * Collect the PREFIX* entries of envp. Unknown names are ignored: Kubernetes
 * injects OUTBOX_RELAY_SERVICE_HOST, OUTBOX_RELAY_PORT and friends for a
 * Service named outbox-relay, and those must not stop the relay. When a name
 * repeats, the first entry wins, as with getenv().
 */
static void scan_env(struct load *ld, char **envp)
{
	const struct opt_spec *spec = ld->spec;
	size_t plen = strlen(spec->env_prefix);

	for (char **e = envp; e && *e; e++) {
		const char *eq;
		char env[ENV_MAX];

		if (strncmp(*e, spec->env_prefix, plen) != 0 || !(eq = strchr(*e, '=')))
			continue;
		for (size_t i = 0; i < spec->nrows; i++) {
			const struct opt_def *o = &spec->rows[i];

			if (!accepts(spec, o))
				continue;
			opt_env_name(spec, o, env, sizeof(env));
			if (strlen(env) == (size_t)(eq - *e) && memcmp(env, *e, strlen(env)) == 0) {
				if (!ld->raw[i].env)
					ld->raw[i].env = eq + 1;
				break;
			}
		}
	}
}

/* See opt.h. */
enum opt_result opt_load(const struct opt_spec *spec, void *cf, int argc, char **argv, char **envp,
                         char *err, size_t errlen)
{
	struct load ld = {spec, cf, calloc(spec->nrows, sizeof(struct raw_value)), err, errlen};
	enum opt_result r = OPT_ERROR;

	if (err && errlen > 0)
		err[0] = '\0';
	if (!ld.raw) {
		(void)msg_oom(err, errlen);
		return OPT_ERROR;
	}
	r = scan_argv(&ld, argc, argv);
	if (r == OPT_OK) {
		scan_env(&ld, envp);
		for (size_t i = 0; i < spec->nrows && r == OPT_OK; i++) {
			if (accepts(spec, &spec->rows[i]) && !apply_option(&ld, &spec->rows[i]))
				r = OPT_ERROR;
		}
	}
	/* Everything is copied by now: take the passwords out of /proc/PID/cmdline. */
	for (size_t i = 0; i < spec->nrows; i++) {
		scrub_raw(&spec->rows[i], ld.raw[i].secret);
		free(ld.raw[i].list);
	}
	free(ld.raw);
	return r;
}

/* See opt.h. Table-driven, so no allocated field can be forgotten. */
void opt_free(const struct opt_spec *spec, void *cf)
{
	if (!cf)
		return;
	for (size_t i = 0; i < spec->nrows; i++) {
		const struct opt_def *o = &spec->rows[i];

		if (o->flags & OPT_F_LEGACY_MS)
			continue; /* the new row's field */
		if (o->kind == OPT_STRING || o->kind == OPT_REDIS_URL) {
			char **s = field_ptr(cf, o->offset);

			if (*s && (o->flags & OPT_F_SECRET))
				explicit_bzero(*s, strlen(*s));
			free(*s);
			*s = NULL;
		} else if (o->kind == OPT_LIST) {
			char ***items = field_ptr(cf, o->offset);
			size_t *count = field_ptr(cf, o->aux_offset);

			for (size_t j = 0; j < *count; j++)
				free((*items)[j]);
			free(*items);
			*items = NULL;
			*count = 0;
		}
		if (o->kind == OPT_REDIS_URL)
			redis_target_finish(field_ptr(cf, o->aux_offset));
	}
}

/* ---- Usage ---- */

/*
 * Print text word-wrapped at USAGE_WIDTH, every line indented by indent.
 * NBSP joins two words that must stay on one line; it prints as a space.
 */
static void print_wrapped(FILE *out, const char *text, int indent)
{
	int col = 0;
	const char *p = text;

	while (*p) {
		size_t wlen;

		while (*p == ' ')
			p++;
		if (!*p)
			break;
		wlen = strcspn(p, " ");
		if (col > indent && col + 1 + (int)wlen > USAGE_WIDTH) {
			fputc('\n', out);
			col = 0;
		}
		if (col == 0) {
			fprintf(out, "%*s", indent, "");
			col = indent;
		} else {
			fputc(' ', out);
			col++;
		}
		for (size_t i = 0; i < wlen; i++)
			fputc(p[i] == NBSP ? ' ' : p[i], out);
		col += (int)wlen;
		p += wlen;
	}
	fputc('\n', out);
}

static void usage_option(const struct opt_spec *spec, FILE *out, const struct opt_def *o)
{
	char flag[64], help[1024], env[ENV_MAX];
	int n;

	if (o->kind == OPT_BOOL)
		n = snprintf(flag, sizeof(flag), "  --[no-]%s", o->name);
	else
		n = snprintf(flag, sizeof(flag), "  --%s %s", o->name, o->metavar);
	opt_env_name(spec, o, env, sizeof(env));
	fprintf(out, "%s%*s env %s\n", flag, n < USAGE_ENV_COL ? USAGE_ENV_COL - n : 0, "", env);

	if (o->flags & OPT_F_REQUIRED)
		(void)snprintf(help, sizeof(help), "%s (required)", o->help);
	else if (o->defval)
		(void)snprintf(help, sizeof(help), "%s (default:%c%s)", o->help, NBSP, o->defval);
	else
		(void)snprintf(help, sizeof(help), "%s", o->help);
	print_wrapped(out, help, USAGE_INDENT);
}

/* See opt.h. A section title is printed when a row it heads is. */
void opt_print_options(const struct opt_spec *spec, FILE *out)
{
	const char *title = NULL;

	for (size_t i = 0; i < spec->nrows; i++) {
		const struct opt_def *o = &spec->rows[i];

		if (o->kind == OPT_GROUP) {
			title = o->name;
			continue;
		}
		if (!(o->cmds & spec->cmd))
			continue;
		if (title)
			fprintf(out, "\n%s:\n", title);
		title = NULL;
		usage_option(spec, out, o);
	}
}
