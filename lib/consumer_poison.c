/*
 * consumer_poison.c - `outbox-consume poison list|replay`: the consumer's
 * dead letters, read and moved back.
 *
 * A worker moves a poison event of stream S to PREFIX:{S} (PREFIX:{T} when S
 * has the hash tag {T}; consumer_read.c): six poison_* fields first, then the
 * event's own fields in their order. `list` prints one line per such entry;
 * `replay` moves chosen entries back, each in one script on the poison
 * stream's slot (which is S's): XADD of the event's own fields to S, XDEL of
 * the poison entry. Never both lost and duplicated: the script runs whole or
 * not at all, and a second replay of the same entry finds nothing.
 *
 * One command at a time through the blocking client (rclient.h): one
 * server, a Sentinel-named master or a Redis Cluster, the same options as
 * the consumer. Nothing is retried: a one-shot command says what failed and
 * exits.
 */
#include <fnmatch.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "consumer.h"
#include "exitcode.h"
#include "log.h"
#include "msg.h"
#include "rclient.h"

#define PROGNAME "outbox-consume poison"
/* Connect, and every reply. */
#define POISON_TIMEOUT_MS 10000
/* Entries read per XRANGE. */
#define POISON_PAGE "500"

/*
 * KEYS[1] the poison stream, KEYS[2] the stream its entry ARGV[1] came from.
 * Nil when the entry is gone; an error when it names another stream; else
 * the new entry's id. The meta fields are the leading ones only: an event's
 * own field of the same name further on is kept.
 */
static const char replay_script[] =
    "local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) "
    "if #e == 0 then return false end "
    "local f, i, from = e[1][2], 1, nil "
    "local meta = {poison_stream=1, poison_entry_id=1, poison_group=1, poison_consumer=1, "
    "poison_deliveries=1, poison_error=1} "
    "while i <= 11 and i < #f and meta[f[i]] do "
    "if f[i] == 'poison_stream' then from = f[i + 1] end i = i + 2 end "
    "if from ~= KEYS[2] then return redis.error_reply('ERR poison entry ' .. ARGV[1] .. "
    "' names stream ' .. tostring(from) .. ', not ' .. KEYS[2]) end "
    "if i > #f then return redis.error_reply('ERR poison entry ' .. ARGV[1] .. "
    "' holds no event fields') end "
    "local id = redis.call('XADD', KEYS[2], '*', unpack(f, i)) "
    "redis.call('XDEL', KEYS[1], ARGV[1]) "
    "return id";

struct poison {
	const struct consumer_config *cf;
	const char *prog; /* "outbox-consume poison list", for messages */
	struct rclient *rc;
	char **keys; /* the poison streams to read, sorted, each once */
	size_t nkeys, capkeys;
	int64_t listed, replayed;
	int code;          /* the exit code of the first failure */
	char errmsg[1024]; /* its line */
};

/* Record the first failure: its exit code and line. Returns false. */
static bool fail(struct poison *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail(struct poison *p, int code, const char *fmt, ...)
{
	va_list ap;

	if (p->code == EXIT_OK) {
		p->code = code;
		va_start(ap, fmt);
		(void)vsnprintf(p->errmsg, sizeof(p->errmsg), fmt, ap);
		va_end(ap);
	}
	return false;
}

/*
 * The poison stream of stream key: PREFIX:{T} when key has a non-empty hash
 * tag {T} (so it shares the stream's cluster slot), else PREFIX:{key}. The
 * one place this name is made: the consumer writes there, poison list and
 * replay read there. False when it does not fit.
 */
bool consumer_poison_key(const char *prefix, const char *key, char *buf, size_t len)
{
	const char *open = strchr(key, '{'), *close = open ? strchr(open + 1, '}') : NULL;
	int n;

	if (open && close && close > open + 1)
		n = snprintf(buf, len, "%s:{%.*s}", prefix, (int)(close - open - 1), open + 1);
	else
		n = snprintf(buf, len, "%s:{%s}", prefix, key);
	return n >= 0 && (size_t)n < len;
}

/* rclient_scan_streams()'s callback, and the named streams: keep a copy of key. */
static bool add_key(void *arg, const char *key, size_t len)
{
	struct poison *p = arg;

	if (p->nkeys == p->capkeys) {
		size_t cap = p->capkeys ? 2 * p->capkeys : 16;
		char **k = realloc(p->keys, cap * sizeof(*k));

		if (!k)
			return false;
		p->keys = k;
		p->capkeys = cap;
	}
	p->keys[p->nkeys] = strndup(key, len);
	if (!p->keys[p->nkeys])
		return false;
	p->nkeys++;
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Is stream one of those asked for (--stream, --stream-pattern; neither: all)? */
static bool wanted(const struct poison *p, const char *stream)
{
	const struct consumer_config *cf = p->cf;

	if (cf->nstreams == 0 && !cf->stream_pattern)
		return true;
	for (size_t i = 0; i < cf->nstreams; i++)
		if (strcmp(cf->streams[i], stream) == 0)
			return true;
	return cf->stream_pattern && fnmatch(cf->stream_pattern, stream, 0) == 0;
}

/*
 * The poison streams to read: those of the named streams, and with
 * --stream-pattern or without --stream every key PREFIX:{* (one SCAN over
 * every master); sorted, each once.
 */
static bool find_keys(struct poison *p)
{
	const struct consumer_config *cf = p->cf;
	char key[1024], pattern[1024], why[512];
	size_t n = 0, j = 0;

	for (size_t i = 0; i < cf->nstreams; i++) {
		if (!consumer_poison_key(cf->poison_prefix, cf->streams[i], key, sizeof(key)))
			return fail(p, EXIT_USAGE, "--stream \"%.100s...\" is too long", cf->streams[i]);
		if (!add_key(p, key, strlen(key)))
			return fail(p, EXIT_FAILURE_RUNTIME, "out of memory");
	}
	if (cf->nstreams == 0 || cf->stream_pattern) {
		/* The prefix matched as written: glob characters in it escaped. */
		for (const char *c = cf->poison_prefix; *c && n + 8 < sizeof(pattern); c++) {
			if (strchr("*?[]\\", *c))
				pattern[n++] = '\\';
			pattern[n++] = *c;
		}
		memcpy(pattern + n, ":{*", 4);
		switch (rclient_scan_streams(p->rc, pattern, add_key, p, why, sizeof(why))) {
		case RCLIENT_OK:
			break;
		case RCLIENT_ABORTED:
			return fail(p, EXIT_FAILURE_RUNTIME, "out of memory");
		default:
			return fail(p, EXIT_REDIS_SETUP, "could not look for the poison streams %s: %s",
			            pattern, why);
		}
	}
	if (p->nkeys > 1)
		qsort(p->keys, p->nkeys, sizeof(*p->keys), cmp_str);
	for (size_t i = 0; i < p->nkeys; i++) {
		if (j > 0 && strcmp(p->keys[j - 1], p->keys[i]) == 0)
			free(p->keys[i]);
		else
			p->keys[j++] = p->keys[i];
	}
	p->nkeys = j;
	return true;
}

/*
 * One command about key, its reply (caller frees), or NULL after fail():
 * the connection's trouble or an error reply, naming what and the key.
 */
static redisReply *command(struct poison *p, const char *what, const char *key, int argc,
                           const char **argv, const size_t *lens)
{
	enum rclient_status st = RCLIENT_OK;
	char why[512];
	redisReply *r;

	r = rclient_command(p->rc, key, argc, argv, lens, POISON_TIMEOUT_MS, false, &st, why,
	                    sizeof(why));
	if (!r) {
		(void)fail(p, EXIT_REDIS_SETUP, "%s on \"%s\" failed: %s", what, key, why);
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		(void)fail(p, EXIT_REDIS_SETUP, "Redis at %s refused %s on \"%s\": %s", rclient_desc(p->rc),
		           what, key, r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* An entry of an XRANGE reply ([id, [field, value, ...]]), or NULL when it is not one. */
static const redisReply *entry_fields(const redisReply *e)
{
	if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
	    e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_ARRAY ||
	    e->element[1]->elements % 2 != 0)
		return NULL;
	for (size_t i = 0; i < e->element[1]->elements; i++)
		if (e->element[1]->element[i]->type != REDIS_REPLY_STRING)
			return NULL;
	return e->element[1];
}

/* A value on a list line: backslash, control bytes (and, unless last, spaces) as \xHH. */
static void put_value(const redisReply *v, bool last)
{
	if (!v || v->len == 0) {
		fputs("-", stdout);
		return;
	}
	for (size_t i = 0; i < v->len; i++) {
		unsigned char ch = (unsigned char)v->str[i];

		if (ch == '\\')
			fputs("\\\\", stdout);
		else if (ch < 0x20 || ch == 0x7f || (ch == ' ' && !last))
			printf("\\x%02x", ch);
		else
			putchar(ch);
	}
}

/* One list line: the poison entry id, then name=value pairs, the error last. */
static void print_entry(const char *pid, const redisReply *fields)
{
	static const struct {
		const char *label, *field;
	} cols[] = {
	    {"stream", "poison_stream"},         {"entry", "poison_entry_id"},
	    {"group", "poison_group"},           {"consumer", "poison_consumer"},
	    {"deliveries", "poison_deliveries"}, {"event", "id"},
	    {"error", "poison_error"},
	};
	size_t n = sizeof(cols) / sizeof(cols[0]);

	fputs(pid, stdout);
	for (size_t i = 0; i < n; i++) {
		printf(" %s=", cols[i].label);
		put_value(rclient_map_get(fields, cols[i].field), i + 1 == n);
	}
	putchar('\n');
}

/*
 * Every entry of poison stream key up to end ("+": all), page by page, each
 * of a wanted stream passed to fn; fn returns false to stop (after fail(),
 * or at --count with p->code unchanged).
 */
static bool each_entry(struct poison *p, const char *key, const char *end,
                       bool (*fn)(struct poison *p, const char *key, const char *pid,
                                  const redisReply *fields))
{
	char start[64] = "-";

	for (;;) {
		const char *argv[] = {"XRANGE", key, start, end, "COUNT", POISON_PAGE};
		redisReply *r = command(p, "XRANGE", key, 6, argv, NULL);
		bool go = true;

		if (!r)
			return false;
		if (r->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(r);
			return fail(p, EXIT_REDIS_SETUP, "unexpected reply to XRANGE on \"%s\"", key);
		}
		for (size_t i = 0; go && i < r->elements; i++) {
			const redisReply *e = r->element[i], *f = entry_fields(e), *from;

			if (!f) {
				go = fail(p, EXIT_REDIS_SETUP, "unexpected entry in XRANGE's reply on \"%s\"", key);
				break;
			}
			(void)snprintf(start, sizeof(start), "(%s", e->element[0]->str);
			from = rclient_map_get(f, "poison_stream");
			if (from && wanted(p, from->str))
				go = fn(p, key, e->element[0]->str, f);
		}
		if (go && r->elements == 0) {
			freeReplyObject(r);
			return true;
		}
		freeReplyObject(r);
		if (!go)
			return false;
	}
}

/* each_entry()'s step of list. */
static bool list_one(struct poison *p, const char *key, const char *pid, const redisReply *fields)
{
	(void)key;
	print_entry(pid, fields);
	p->listed++;
	return p->cf->count == 0 || p->listed < p->cf->count;
}

/*
 * Move poison entry pid of key back to the stream it names (from), in one
 * script. *gone when the entry was no longer there (replayed meanwhile).
 */
static bool replay_one_of(struct poison *p, const char *key, const char *pid, const char *from,
                          bool *gone)
{
	const char *argv[] = {"EVAL", replay_script, "2", key, from, pid};
	redisReply *r = command(p, "EVAL (replaying a poison entry)", key, 6, argv, NULL);

	*gone = false;
	if (!r)
		return false;
	if (r->type == REDIS_REPLY_NIL) {
		*gone = true;
	} else if (r->type == REDIS_REPLY_STRING) {
		printf("%s -> %s stream=%s\n", pid, r->str, from);
		p->replayed++;
	} else {
		freeReplyObject(r);
		return fail(p, EXIT_REDIS_SETUP, "unexpected reply to EVAL on \"%s\"", key);
	}
	freeReplyObject(r);
	return true;
}

/* each_entry()'s step of replay --all: an entry gone meanwhile is someone else's replay. */
static bool replay_all_one(struct poison *p, const char *key, const char *pid,
                           const redisReply *fields)
{
	bool gone;

	return replay_one_of(p, key, pid, rclient_map_get(fields, "poison_stream")->str, &gone);
}

/* A stream entry id as XADD makes them: MS-SEQ, or MS (digits only). */
static bool valid_id(const char *id)
{
	const char *dash = strchr(id, '-');
	size_t ms = dash ? (size_t)(dash - id) : strlen(id);

	if (ms == 0 || ms > 20 || strspn(id, "0123456789") != ms)
		return false;
	return !dash || (dash[1] && strlen(dash + 1) <= 20 &&
	                 strspn(dash + 1, "0123456789") == strlen(dash + 1));
}

/*
 * Where --entry id is: the one poison stream holding it (of a wanted
 * stream), its key in *key_i and the stream it came from in from (copied).
 */
static bool locate(struct poison *p, const char *id, size_t *key_i, char *from, size_t fromlen)
{
	bool found = false;

	for (size_t i = 0; i < p->nkeys; i++) {
		const char *argv[] = {"XRANGE", p->keys[i], id, id};
		redisReply *r = command(p, "XRANGE", p->keys[i], 4, argv, NULL);
		const redisReply *f, *s;

		if (!r)
			return false;
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && (f = entry_fields(r->element[0])) &&
		    (s = rclient_map_get(f, "poison_stream")) && wanted(p, s->str)) {
			if (found) {
				freeReplyObject(r);
				return fail(p, EXIT_USAGE,
				            "poison entry %s is in both \"%s\" and \"%s\": name its stream with "
				            "--stream",
				            id, p->keys[*key_i], p->keys[i]);
			}
			found = true;
			*key_i = i;
			(void)snprintf(from, fromlen, "%s", s->str);
		}
		freeReplyObject(r);
	}
	if (!found)
		return fail(p, EXIT_REDIS_STATE,
		            "poison entry %s not found in %s%s%s: `outbox-consume poison list` shows the "
		            "entries there are",
		            id, p->nkeys == 1 ? "\"" : "",
		            p->nkeys == 1 ? p->keys[0] : "the poison streams", p->nkeys == 1 ? "\"" : "");
	return true;
}

/* replay --entry: every entry located first (nothing moves if one is missing), then moved. */
static bool replay_entries(struct poison *p)
{
	const struct consumer_config *cf = p->cf;
	size_t *where = calloc(cf->nentries, sizeof(*where));
	char **from = calloc(cf->nentries, sizeof(*from));
	bool ok = where && from;
	char stream[1024];

	if (!ok)
		fail(p, EXIT_FAILURE_RUNTIME, "out of memory");
	for (size_t i = 0; ok && i < cf->nentries; i++) {
		if (!valid_id(cf->entries[i]))
			ok = fail(p, EXIT_USAGE,
			          "invalid value \"%.64s\" for --entry: a stream entry id, MS-SEQ such as "
			          "1700000000000-0, as poison list prints it",
			          cf->entries[i]);
		else if (!locate(p, cf->entries[i], &where[i], stream, sizeof(stream)))
			ok = false;
		else if (!(from[i] = strdup(stream)))
			ok = fail(p, EXIT_FAILURE_RUNTIME, "out of memory");
	}
	for (size_t i = 0; ok && i < cf->nentries; i++) {
		bool gone;

		ok = replay_one_of(p, p->keys[where[i]], cf->entries[i], from[i], &gone);
		if (ok && gone)
			ok = fail(p, EXIT_REDIS_STATE,
			          "poison entry %s left \"%s\" while this ran (replayed by another "
			          "command?): nothing moved for it",
			          cf->entries[i], p->keys[where[i]]);
	}
	for (size_t i = 0; from && i < cf->nentries; i++)
		free(from[i]);
	free(from);
	free(where);
	return ok;
}

/*
 * replay --all: each poison stream up to its last entry at the start, so an
 * event replayed and poisoned again meanwhile is not replayed twice here.
 */
static bool replay_all(struct poison *p)
{
	for (size_t i = 0; i < p->nkeys; i++) {
		const char *argv[] = {"XREVRANGE", p->keys[i], "+", "-", "COUNT", "1"};
		redisReply *r = command(p, "XREVRANGE", p->keys[i], 6, argv, NULL);
		char end[64];

		if (!r)
			return false;
		if (r->type != REDIS_REPLY_ARRAY || r->elements > 1 ||
		    (r->elements == 1 && !entry_fields(r->element[0]))) {
			freeReplyObject(r);
			return fail(p, EXIT_REDIS_SETUP, "unexpected reply to XREVRANGE on \"%s\"", p->keys[i]);
		}
		if (r->elements == 0) {
			freeReplyObject(r);
			continue;
		}
		(void)snprintf(end, sizeof(end), "%s", r->element[0]->element[0]->str);
		freeReplyObject(r);
		if (!each_entry(p, p->keys[i], end, replay_all_one))
			return false;
	}
	return true;
}

static void poison_usage(FILE *out)
{
	fprintf(
	    out,
	    "Usage: outbox-consume poison list [--stream KEY... | --stream-pattern GLOB] [--count N]\n"
	    "       outbox-consume poison replay [--stream KEY...] (--entry ID... | --all)\n"
	    "The poison entries a worker (--exec, --handler) moved to PREFIX:{STREAM}\n"
	    "(--poison-prefix), listed or moved back to their streams.\n"
	    "\n"
	    "list prints one line per entry: its id in the poison stream, then stream=,\n"
	    "entry= (its id there), group=, consumer=, deliveries=, event= (the event's id\n"
	    "field) and error=, last (spaces, backslashes and control bytes in the others as\n"
	    "\\xHH). Without --stream and --stream-pattern it reads every poison stream.\n"
	    "replay moves each chosen entry back in one script on the stream's slot: the\n"
	    "event's own fields, in their order, XADDed to its stream as a new entry (which\n"
	    "every group reads again), the poison entry deleted. It prints\n"
	    "\"POISON-ID -> NEW-ID stream=STREAM\" per entry.\n"
	    "\n"
	    "Options (also as OUTBOX_CONSUME_* variables; flags win):\n");
	consumer_print_options(CONSUMER_CMD_POISON, out);
	fprintf(out, "  -h, --help\n"
	             "      print this help and exit\n"
	             "\n"
	             "Exit status: 0 done, 2 bad options (replay without --entry or --all), 5 when\n"
	             "Redis fails or refuses a command, 7 when an --entry is not in the poison\n"
	             "streams chosen (then nothing is moved).\n");
}

/* Run list or replay on a loaded configuration; the exit code. */
static int run(struct poison *p, bool replay)
{
	const struct consumer_config *cf = p->cf;
	bool permanent = false, ok;
	char why[512];

	if (replay && !cf->all && cf->nentries == 0) {
		fail(p, EXIT_USAGE,
		     "poison replay needs --entry ID (repeatable) or --all: name the poison entries to "
		     "move back (poison list shows them)");
		return p->code;
	}
	if (replay && cf->all && cf->nentries > 0) {
		fail(p, EXIT_USAGE, "--entry and --all both choose what to replay: give one");
		return p->code;
	}
	p->rc = rclient_create(&cf->redis, POISON_TIMEOUT_MS);
	if (!p->rc) {
		fail(p, EXIT_FAILURE_RUNTIME, "out of memory");
		return p->code;
	}
	if (!rclient_connect(p->rc, &permanent, why, sizeof(why))) {
		fail(p, EXIT_REDIS_SETUP, "%s", why);
		return p->code;
	}
	ok = find_keys(p);
	for (size_t i = 0; ok && !replay && i < p->nkeys; i++)
		ok = each_entry(p, p->keys[i], "+", list_one);
	if (ok && replay)
		ok = cf->all ? replay_all(p) : replay_entries(p);
	if (fflush(stdout) != 0 || ferror(stdout))
		fail(p, EXIT_FAILURE_RUNTIME, "could not write to stdout");
	if (ok && replay && cf->all && p->replayed == 0)
		fprintf(stderr, "%s: no poison entries to replay\n", p->prog);
	return p->code;
}

/* See consumer.h. */
int consumer_poison_main(int argc, char **argv, char **envp)
{
	struct consumer_config cf;
	struct poison p;
	char err[1024], prog[64];
	bool replay;
	int rc;

	if (argc < 2 || argv[1][0] == '-') {
		if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
			poison_usage(stdout);
			return EXIT_OK;
		}
		fprintf(stderr, "%s: say what to do: poison list or poison replay (see %s --help)\n",
		        PROGNAME, PROGNAME);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "list") != 0 && strcmp(argv[1], "replay") != 0) {
		fprintf(stderr, "%s: unknown command \"%.64s\": use poison list or poison replay\n",
		        PROGNAME, argv[1]);
		return EXIT_USAGE;
	}
	replay = strcmp(argv[1], "replay") == 0;
	(void)snprintf(prog, sizeof(prog), "%s %s", PROGNAME, argv[1]);
	switch (consumer_config_load_as(&cf, CONSUMER_CMD_POISON, prog, poison_usage, argc - 1,
	                                argv + 1, envp, err, sizeof(err))) {
	case CONFIG_OK:
		break;
	case CONFIG_HELP:
	case CONFIG_VERSION:
		return EXIT_OK;
	case CONFIG_ERROR:
	default:
		fprintf(stderr, "%s: %s\n", prog, err);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < cf.nwarnings; i++)
		log_warn("%s", cf.warnings[i]);
	memset(&p, 0, sizeof(p));
	p.cf = &cf;
	p.prog = prog;
	rc = run(&p, replay);
	if (rc != EXIT_OK)
		fprintf(stderr, "%s: %s\n", prog, p.errmsg);
	rclient_destroy(p.rc);
	for (size_t i = 0; i < p.nkeys; i++)
		free(p.keys[i]);
	free(p.keys);
	consumer_config_finish(&cf);
	return rc;
}
