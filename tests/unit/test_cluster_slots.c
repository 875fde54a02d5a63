/*
 * test_cluster_slots.c - unit tests for lib/cluster_slots.c: canned CLUSTER
 * SLOTS and COMMAND INFO replies, valid and hostile, fed as RESP bytes
 * through hiredis's reader. Valid maps must come out right; every hostile
 * reply must be refused with its one-line reason (and, under ASan, without
 * touching memory it does not own).
 *
 * Replies are written in a compact notation turned into RESP by resp():
 *   [a b ...]  array          12, -3   integer      "text"  bulk string
 *   nil        nil bulk       +word    status       !word   error ('_' is a space)
 */
#include "cluster_slots.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>

#include "buf.h"
#include "test.h"

#define SEED "seed.example"

/* Append the RESP form of one value of spec at *p; false on a bad spec. */
static bool resp_value(const char **p, struct buf *out);

static void skip_space(const char **p)
{
	while (**p == ' ')
		(*p)++;
}

static bool resp_value(const char **p, struct buf *out)
{
	char hdr[32];
	const char *s = *p;

	if (*s == '[') {
		struct buf body = {0};
		size_t n = 0;

		s++;
		for (;;) {
			skip_space(&s);
			if (*s == ']' || *s == '\0')
				break;
			if (!resp_value(&s, &body)) {
				buf_finish(&body);
				return false;
			}
			n++;
		}
		if (*s != ']') {
			buf_finish(&body);
			return false;
		}
		snprintf(hdr, sizeof(hdr), "*%zu\r\n", n);
		buf_append(out, hdr, strlen(hdr));
		buf_append(out, body.data, body.len);
		buf_finish(&body);
		*p = s + 1;
		return true;
	}
	if (*s == '"') {
		const char *e = strchr(s + 1, '"');

		if (!e)
			return false;
		snprintf(hdr, sizeof(hdr), "$%zu\r\n", (size_t)(e - s - 1));
		buf_append(out, hdr, strlen(hdr));
		buf_append(out, s + 1, (size_t)(e - s - 1));
		buf_append(out, "\r\n", 2);
		*p = e + 1;
		return true;
	}
	if (strncmp(s, "nil", 3) == 0) {
		buf_append(out, "$-1\r\n", 5);
		*p = s + 3;
		return true;
	}
	if (*s == '+' || *s == '!' || *s == '-' || (*s >= '0' && *s <= '9')) {
		size_t n = strcspn(s + 1, " ]") + 1;
		char t = *s == '+' ? '+' : *s == '!' ? '-' : ':';
		size_t skip = (*s == '+' || *s == '!') ? 1 : 0;

		buf_append(out, &t, 1);
		for (size_t i = skip; i < n; i++)
			buf_putc(out, s[i] == '_' ? ' ' : s[i]);
		buf_append(out, "\r\n", 2);
		*p = s + n;
		return true;
	}
	return false;
}

/* Feed RESP bytes through a hiredis reader; the complete reply or NULL. */
static redisReply *read_resp(const char *bytes, size_t len)
{
	redisReader *rd = redisReaderCreate();
	void *reply = NULL;

	if (!rd)
		return NULL;
	if (redisReaderFeed(rd, bytes, len) != REDIS_OK || redisReaderGetReply(rd, &reply) != REDIS_OK)
		reply = NULL;
	redisReaderFree(rd);
	return reply;
}

/* The reply spec describes, read back through hiredis (abort on a bad spec). */
static redisReply *resp(const char *spec)
{
	struct buf b = {0};
	const char *p = spec;
	redisReply *r;

	if (!resp_value(&p, &b) || *p != '\0') {
		printf("# bad spec: %s\n", spec);
		fflush(stdout);
		abort();
	}
	r = read_resp(b.data, b.len);
	buf_finish(&b);
	if (!r) {
		printf("# hiredis did not read: %s\n", spec);
		fflush(stdout);
		abort();
	}
	return r;
}

/* err must be one printable line containing want. */
static bool says(const char *name, const char *err, const char *want)
{
	if (!strstr(err, want)) {
		printf("# %s: err \"%s\" lacks \"%s\"\n", name, err, want);
		return false;
	}
	for (const char *c = err; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			printf("# %s: err \"%s\" has a control byte\n", name, err);
			return false;
		}
	return true;
}

/* Parse r (freed here) expecting a refusal whose message contains want. */
static bool refused(const char *name, redisReply *r, const char *seed, const char *want)
{
	char err[256] = "";
	struct cluster_slots_map *map = cluster_slots_parse(r, seed, err, sizeof(err));
	bool ok = true;

	if (map) {
		printf("# %s: accepted, expected a refusal\n", name);
		ok = false;
	} else {
		ok = says(name, err, want);
	}
	cluster_slots_map_free(map);
	freeReplyObject(r);
	return ok;
}

static bool node_is(const struct cluster_slots_map *m, int slot, const char *host, int port)
{
	int i = m->slot_node[slot];

	if (i < 0 || i >= m->nnodes) {
		printf("# slot %d: node %d\n", slot, i);
		return false;
	}
	if (strcmp(m->nodes[i].host, host) != 0 || m->nodes[i].port != port) {
		printf("# slot %d: %s:%d, want %s:%d\n", slot, m->nodes[i].host, m->nodes[i].port, host,
		       port);
		return false;
	}
	return true;
}

/* Parse r (freed here) expecting a map; NULL with a diagnostic otherwise. */
static struct cluster_slots_map *accepted(const char *name, redisReply *r, const char *seed)
{
	char err[256] = "";
	struct cluster_slots_map *map = cluster_slots_parse(r, seed, err, sizeof(err));

	if (!map)
		printf("# %s: refused: %s\n", name, err);
	freeReplyObject(r);
	return map;
}

TEST(three_masters_with_replicas)
{
	struct cluster_slots_map *m =
	    accepted("three",
	             resp("[[0 5460 [\"10.0.0.1\" 7000 \"id1\"] [\"10.0.0.4\" 7003 \"id4\"]]"
	                  " [5461 10922 [\"10.0.0.2\" 7001 \"id2\"] [\"10.0.0.5\" 7004 \"id5\"]]"
	                  " [10923 16383 [\"10.0.0.3\" 7002 \"id3\"]]]"),
	             SEED);

	CHECK(m);
	if (!m)
		return;
	CHECK_INT(m->nnodes, 3);
	CHECK(node_is(m, 0, "10.0.0.1", 7000));
	CHECK(node_is(m, 5460, "10.0.0.1", 7000));
	CHECK(node_is(m, 5461, "10.0.0.2", 7001));
	CHECK(node_is(m, 10922, "10.0.0.2", 7001));
	CHECK(node_is(m, 10923, "10.0.0.3", 7002));
	CHECK(node_is(m, 16383, "10.0.0.3", 7002));
	cluster_slots_map_free(m);
}

TEST(hostnames_and_metadata)
{
	/* Redis 7: a fourth element with networking metadata, not read. */
	struct cluster_slots_map *m =
	    accepted("hostnames",
	             resp("[[0 16383 [\"redis-0.svc.example\" 6379 \"abc\" [\"hostname\" "
	                  "\"redis-0.svc.example\"]] [\"redis-1.svc.example\" 6379 \"def\" []]]]"),
	             SEED);

	CHECK(m);
	if (!m)
		return;
	CHECK_INT(m->nnodes, 1);
	CHECK(node_is(m, 8000, "redis-0.svc.example", 6379));
	cluster_slots_map_free(m);
}

TEST(empty_or_nil_host_is_the_seed)
{
	struct cluster_slots_map *m = accepted(
	    "empty host",
	    resp("[[0 8191 [\"\" 7000 \"a\"]] [8192 12000 [nil 7001 \"b\"]] [12001 16383 [\"\" "
	         "7000 \"a\"]]]"),
	    "127.0.0.1");

	CHECK(m);
	if (!m)
		return;
	CHECK_INT(m->nnodes, 2); /* the first and third entry are one master */
	CHECK(node_is(m, 0, "127.0.0.1", 7000));
	CHECK(node_is(m, 9000, "127.0.0.1", 7001));
	CHECK(node_is(m, 16383, "127.0.0.1", 7000));
	cluster_slots_map_free(m);
	CHECK(refused("empty seed", resp("[[0 1 [\"\" 7000]]]"), "", "no host"));
	CHECK(refused("no seed", resp("[[0 1 [nil 7000]]]"), NULL, "no host"));
}

TEST(partial_map_and_short_master)
{
	/* [host, port] without the id is enough; unlisted slots stay unassigned. */
	struct cluster_slots_map *m =
	    accepted("partial", resp("[[100 200 [\"h\" 1]] [300 300 [\"h\" 65535]]]"), SEED);

	CHECK(m);
	if (!m)
		return;
	CHECK_INT(m->nnodes, 2);
	CHECK_INT(m->slot_node[0], -1);
	CHECK_INT(m->slot_node[99], -1);
	CHECK(node_is(m, 100, "h", 1));
	CHECK(node_is(m, 200, "h", 1));
	CHECK_INT(m->slot_node[201], -1);
	CHECK(node_is(m, 300, "h", 65535));
	CHECK_INT(m->slot_node[16383], -1);
	cluster_slots_map_free(m);
}

/* "[[0 0 ["h0" 1]] [1 1 ["h1" 1]] ...]" with n distinct masters. */
static redisReply *many_masters(int n)
{
	struct buf b = {0};
	redisReply *r;

	buf_append(&b, "[", 1);
	for (int i = 0; i < n; i++) {
		char e[64];

		snprintf(e, sizeof(e), "%s[%d %d [\"h%d\" %d]]", i ? " " : "", i, i, i, 1000 + i);
		buf_append(&b, e, strlen(e));
	}
	buf_puts(&b, "]");
	r = resp(b.data);
	buf_finish(&b);
	return r;
}

TEST(node_limit)
{
	struct cluster_slots_map *m = accepted("64 masters", many_masters(64), SEED);

	CHECK(m);
	if (m) {
		CHECK_INT(m->nnodes, 64);
		CHECK(node_is(m, 63, "h63", 1063));
	}
	cluster_slots_map_free(m);
	CHECK(refused("65 masters", many_masters(65), SEED, "more than 64 masters"));
	CHECK(refused("1000 masters", many_masters(1000), SEED, "more than 64 masters"));
}

TEST(host_length)
{
	char host[300], spec[400];
	struct cluster_slots_map *m;

	memset(host, 'a', sizeof(host));
	host[255] = '\0';
	snprintf(spec, sizeof(spec), "[[0 16383 [\"%s\" 6379]]]", host);
	m = accepted("255-byte host", resp(spec), SEED);
	CHECK(m);
	if (m)
		CHECK(node_is(m, 1, host, 6379));
	cluster_slots_map_free(m);
	host[255] = 'a';
	host[256] = '\0';
	snprintf(spec, sizeof(spec), "[[0 16383 [\"%s\" 6379]]]", host);
	CHECK(refused("256-byte host", resp(spec), SEED, "host is 256 bytes, more than 255"));
}

/* Hostile replies: each is refused with the reason quoted. */
static const struct {
	const char *name, *spec, *want;
} hostile[] = {
    {"status", "+OK", "the reply is a status, not an array"},
    {"integer", "5", "the reply is an integer, not an array"},
    {"nil", "nil", "the reply is nil, not an array"},
    {"error", "!ERR_This_instance_has_cluster_support_disabled", "is an error"},
    {"no entries", "[]", "no slots are assigned"},
    {"entry integer", "[5]", "entry 0 is an integer, not an array"},
    {"entry string", "[[0 16383 [\"h\" 1]] \"x\"]", "entry 1 is a string, not an array"},
    {"entry nil", "[nil]", "entry 0 is nil"},
    {"entry empty", "[[]]", "entry 0 has 0 elements, fewer than 3"},
    {"no master", "[[0 16383]]", "entry 0 has 2 elements, fewer than 3"},
    {"start > end", "[[10 5 [\"h\" 1]]]",
     "start slot 10 and end slot 5 are not a range within 0-16383"},
    {"end 16384", "[[0 16384 [\"h\" 1]]]", "start slot 0 and end slot 16384 are not a range"},
    {"end huge", "[[0 9223372036854775807 [\"h\" 1]]]", "not a range"},
    {"negative start", "[[-1 10 [\"h\" 1]]]", "start slot -1 and end slot 10 are not a range"},
    {"very negative start", "[[-9223372036854775808 0 [\"h\" 1]]]", "not a range"},
    {"negative range", "[[-100 -1 [\"h\" 1]]]", "not a range"},
    {"start 16384", "[[16384 16390 [\"h\" 1]]]",
     "start slot 16384 and end slot 16390 are not a range"},
    {"start 20000", "[[20000 10 [\"h\" 1]]]", "not a range"},
    {"start string", "[[\"0\" 16383 [\"h\" 1]]]", "the slot range is a string and an integer"},
    {"end nil", "[[0 nil [\"h\" 1]]]", "the slot range is an integer and nil"},
    {"start array", "[[[0] 1 [\"h\" 1]]]",
     "the slot range is an array and an integer, not two integers"},
    {"master string", "[[0 1 \"h\"]]", "the master is a string, not an array"},
    {"master nil", "[[0 1 nil]]", "the master is nil, not an array"},
    {"master short", "[[0 1 [\"h\"]]]", "the master has 1 elements, fewer than 2"},
    {"master empty", "[[0 1 []]]", "the master has 0 elements"},
    {"port string", "[[0 1 [\"h\" \"7000\"]]]", "the master's port is a string, not an integer"},
    {"port nil", "[[0 1 [\"h\" nil]]]", "the master's port is nil"},
    {"port 0", "[[0 1 [\"h\" 0]]]", "the master's port 0 is outside 1-65535"},
    {"port 70000", "[[0 1 [\"h\" 70000]]]", "port 70000 is outside 1-65535"},
    {"port -1", "[[0 1 [\"h\" -1]]]", "port -1 is outside"},
    {"host integer", "[[0 1 [7 7000]]]", "the master's host is an integer, not a string"},
    {"host array", "[[0 1 [[\"h\"] 7000]]]", "the master's host is an array"},
    {"host status", "[[0 1 [+h 7000]]]", "the master's host is a status"},
    {"host control", "[[0 1 [\"h\x01x\" 7000]]]", "host \"h?x\" has a control byte"},
    {"host newline", "[[0 1 [\"h\nx\" 7000]]]", "has a control byte"},
    {"host del", "[[0 1 [\"h\x7f\" 7000]]]", "has a control byte"},
    {"id integer", "[[0 1 [\"h\" 1 5]]]", "the master's node id is an integer, not a string"},
    {"replica integer", "[[0 1 [\"h\" 1] 5]]", "the replica 1 is an integer, not an array"},
    {"replica port", "[[0 1 [\"h\" 1] [\"r\" 2] [\"r\" \"x\"]]]",
     "the replica 2's port is a string"},
    {"replica host", "[[0 1 [\"h\" 1] [[] 2]]]", "the replica 1's host is an array"},
    {"replica short", "[[0 1 [\"h\" 1] [\"r\"]]]", "the replica 1 has 1 elements"},
    {"overlap", "[[0 10 [\"a\" 1]] [5 20 [\"b\" 2]]]", "entry 1: slot 5 is listed twice"},
    {"repeat", "[[0 16383 [\"a\" 1]] [0 16383 [\"a\" 1]]]", "slot 0 is listed twice"},
    {"late bad entry", "[[0 10 [\"a\" 1]] [11 20 [\"b\" 2]] [21 22 [\"c\" 99999]]]",
     "entry 2: the master's port 99999"},
};

TEST(hostile_cluster_slots)
{
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++)
		CHECK(refused(hostile[i].name, resp(hostile[i].spec), SEED, hostile[i].want));
	CHECK(refused("no reply", NULL, SEED, "no reply"));
}

TEST(hostile_raw_bytes)
{
	/* A NUL inside the host: a bulk string carries it, C strings cannot. */
	static const char nul_host[] = "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$3\r\nh\0x\r\n:7000\r\n";
	/* Nested deeper than the map has any use for. */
	static const char deep[] = "*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n";
	redisReply *r = read_resp(nul_host, sizeof(nul_host) - 1);

	CHECK(r);
	if (r)
		CHECK(refused("nul host", r, SEED, "has a control byte"));
	r = read_resp(deep, sizeof(deep) - 1);
	CHECK(r);
	if (r)
		CHECK(refused("deep", r, SEED, "the master has 1 elements"));
}

/* COMMAND INFO replies for n commands and the verdict each must get. */
static const struct {
	const char *name, *spec;
	size_t n;
	enum cluster_cmdinfo want;
	size_t missing;   /* for CMDINFO_MISSING */
	const char *says; /* for CMDINFO_UNREADABLE */
} cmdinfo[] = {
    {"all present", "[[\"xadd\" -5] [\"xgroup\" -2] [\"evalsha\" -3]]", 3, CMDINFO_PRESENT, 0,
     NULL},
    {"all present, aof", "[[\"xadd\"] [\"xgroup\"] [\"evalsha\"] [\"waitaof\"]]", 4,
     CMDINFO_PRESENT, 0, NULL},
    {"xadd missing", "[nil [\"xgroup\"] [\"evalsha\"]]", 3, CMDINFO_MISSING, 0, NULL},
    {"xgroup missing", "[[\"xadd\"] nil [\"evalsha\"]]", 3, CMDINFO_MISSING, 1, NULL},
    {"waitaof missing", "[[\"xadd\"] [\"xgroup\"] [\"evalsha\"] nil]", 4, CMDINFO_MISSING, 3, NULL},
    {"first nil wins", "[[\"xadd\"] nil nil nil]", 4, CMDINFO_MISSING, 1, NULL},
    {"short", "[nil]", 3, CMDINFO_UNREADABLE, 0, "1 entries for 3 commands"},
    {"empty", "[]", 3, CMDINFO_UNREADABLE, 0, "0 entries for 3 commands"},
    /* The old loop read argv[] past its end for a nil beyond the asked commands. */
    {"long", "[[\"xadd\"] [\"xgroup\"] [\"evalsha\"] nil nil nil nil]", 3, CMDINFO_UNREADABLE, 0,
     "7 entries for 3 commands"},
    {"long, aof", "[[\"xadd\"] [\"xgroup\"] [\"evalsha\"] [\"waitaof\"] nil]", 4,
     CMDINFO_UNREADABLE, 0, "5 entries for 4 commands"},
    {"string entry", "[[\"xadd\"] \"xgroup\" [\"evalsha\"]]", 3, CMDINFO_UNREADABLE, 0,
     "entry 1 is a string, not an array or nil"},
    {"bad entry after nil", "[nil [\"xgroup\"] 5]", 3, CMDINFO_UNREADABLE, 0,
     "entry 2 is an integer"},
    {"status entry", "[[\"xadd\"] [\"xgroup\"] +OK]", 3, CMDINFO_UNREADABLE, 0,
     "entry 2 is a status"},
    {"error", "!ERR_unknown_command_'COMMAND'", 3, CMDINFO_UNREADABLE, 0,
     "the reply is an error, not an array"},
    {"status", "+OK", 3, CMDINFO_UNREADABLE, 0, "the reply is a status"},
    {"nil", "nil", 3, CMDINFO_UNREADABLE, 0, "the reply is nil"},
    {"integer", "3", 3, CMDINFO_UNREADABLE, 0, "the reply is an integer"},
};

TEST(command_info)
{
	for (size_t i = 0; i < sizeof(cmdinfo) / sizeof(cmdinfo[0]); i++) {
		redisReply *r = resp(cmdinfo[i].spec);
		size_t missing = 999;
		char err[256] = "";
		enum cluster_cmdinfo v =
		    cluster_slots_command_info(r, cmdinfo[i].n, &missing, err, sizeof(err));

		if (v != cmdinfo[i].want) {
			printf("# %s: verdict %d, want %d (%s)\n", cmdinfo[i].name, (int)v,
			       (int)cmdinfo[i].want, err);
			CHECK(false);
		} else if (v == CMDINFO_MISSING) {
			CHECK_INT(missing, cmdinfo[i].missing);
		} else {
			CHECK_INT(missing, 999); /* written only for a missing command */
			if (v == CMDINFO_UNREADABLE)
				CHECK(says(cmdinfo[i].name, err, cmdinfo[i].says));
		}
		freeReplyObject(r);
	}
	{
		size_t missing = 999;
		char err[64] = "";

		CHECK_INT(cluster_slots_command_info(NULL, 3, &missing, err, sizeof(err)),
		          CMDINFO_UNREADABLE);
		CHECK_STR(err, "no reply");
	}
}

/* Slots as redis-server 7.0's CLUSTER KEYSLOT gives them. */
TEST(key_slot)
{
	static const struct {
		const char *key;
		unsigned slot;
	} cases[] = {
	    {"foo", 12182},
	    {"bar", 5061},
	    {"somekey", 11058},
	    {"foo{hash_tag}", 2515},
	    {"{user1000}.following", 3443},
	    {"foo{}{bar}", 8363},    /* empty tag: the whole key */
	    {"foo{{bar}}zap", 4015}, /* tag "{bar" */
	    {"foo{bar}{zap}", 5061}, /* first tag only: "bar" */
	    {"{}", 15257},
	    {"outbox:agg-7", 10198},
	    {"a{", 14311}, /* no closing brace */
	    {"}{x}", 16287},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned got = cluster_slots_key_slot(cases[i].key, strlen(cases[i].key));

		if (got != cases[i].slot)
			printf("# %s: slot %u, want %u\n", cases[i].key, got, cases[i].slot);
		CHECK(got == cases[i].slot);
	}
	/* Binary-safe: a NUL inside the key counts. */
	CHECK(cluster_slots_key_slot("foo\0x", 5) != cluster_slots_key_slot("foo", 3));
}

TEST(redirect)
{
	char host[CLUSTER_SLOTS_HOST_MAX + 1];
	unsigned slot = 0;
	int port = 0;
	bool ask = true;

	CHECK(cluster_slots_redirect("MOVED 3999 127.0.0.1:6381", &ask, &slot, host, sizeof(host),
	                             &port));
	CHECK(!ask);
	CHECK_INT(slot, 3999);
	CHECK_STR(host, "127.0.0.1");
	CHECK_INT(port, 6381);
	CHECK(cluster_slots_redirect("ASK 16383 redis-2.example:7000", &ask, &slot, host, sizeof(host),
	                             &port));
	CHECK(ask);
	CHECK_INT(slot, 16383);
	CHECK_STR(host, "redis-2.example");
	CHECK_INT(port, 7000);
	CHECK(cluster_slots_redirect("MOVED 1 ::1:7001", &ask, &slot, host, sizeof(host), &port));
	CHECK_STR(host, "::1");
	CHECK_INT(port, 7001);
	CHECK(cluster_slots_redirect("MOVED 12 :6379", &ask, &slot, host, sizeof(host), &port));
	CHECK_STR(host, "");
	CHECK_INT(port, 6379);
	{
		static const char *const refused[] = {
		    "ERR unknown command",
		    "MOVED",
		    "MOVED 16384 h:1",
		    "MOVED -1 h:1",
		    "MOVED 12 h",
		    "MOVED 12 h:0",
		    "MOVED 12 h:65536",
		    "MOVED 12 h:12x",
		    "ASK 12 h x:1",
		    "MOVEDX 12 h:1",
		    "TRYAGAIN Multiple keys request during rehashing of slot",
		};

		for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
			bool ok = cluster_slots_redirect(refused[i], &ask, &slot, host, sizeof(host), &port);

			if (ok)
				printf("# accepted: %s\n", refused[i]);
			CHECK(!ok);
		}
	}
	/* A host that does not fit the caller's buffer is refused, not cut. */
	{
		char small[4];

		CHECK(!cluster_slots_redirect("MOVED 1 abcd:1", &ask, &slot, small, sizeof(small), &port));
		CHECK(cluster_slots_redirect("MOVED 1 abc:1", &ask, &slot, small, sizeof(small), &port));
	}
}

int main(void)
{
	RUN(three_masters_with_replicas);
	RUN(hostnames_and_metadata);
	RUN(empty_or_nil_host_is_the_seed);
	RUN(partial_map_and_short_master);
	RUN(node_limit);
	RUN(host_length);
	RUN(hostile_cluster_slots);
	RUN(hostile_raw_bytes);
	RUN(command_info);
	RUN(key_slot);
	RUN(redirect);
	return test_done();
}
