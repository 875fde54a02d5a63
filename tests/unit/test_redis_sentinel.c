/*
 * test_redis_sentinel.c - the Sentinel reply parsers (lib/redis_sentinel.c),
 * fed RESP bytes through hiredis's reader as a server would send them.
 * Discovery itself runs against real Sentinels in 52_sentinel_failover.
 */
#include "test.h"

#include <hiredis/hiredis.h>

#include "redis_sentinel.h"

static redisReply *rd_len(const char *resp, size_t len)
{
	redisReader *r = redisReaderCreate();
	void *reply = NULL;

	if (!r)
		return NULL;
	if (redisReaderFeed(r, resp, len) != REDIS_OK || redisReaderGetReply(r, &reply) != REDIS_OK)
		reply = NULL;
	redisReaderFree(r);
	return reply;
}

static redisReply *rd(const char *resp)
{
	return rd_len(resp, strlen(resp));
}

static enum sentinel_addr addr_len(const char *resp, size_t len, char *host, size_t hostlen,
                                   int *port)
{
	redisReply *r = rd_len(resp, len);
	enum sentinel_addr a;

	if (!r) {
		printf("# hiredis did not read %s\n", resp);
		fflush(stdout);
		abort();
	}
	a = redis_sentinel_parse_addr(r, host, hostlen, port);
	freeReplyObject(r);
	return a;
}

static enum sentinel_addr addr(const char *resp, char *host, size_t hostlen, int *port)
{
	return addr_len(resp, strlen(resp), host, hostlen, port);
}

TEST(addr)
{
	char host[REDIS_SENTINEL_HOST_MAX] = "unchanged", tiny[4] = "";
	int port = -1;

	CHECK(addr("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n", host, sizeof(host), &port) ==
	      SENTINEL_ADDR_OK);
	CHECK_STR(host, "127.0.0.1");
	CHECK_INT(port, 6380);
	CHECK(addr("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n", host, sizeof(host), &port) ==
	      SENTINEL_ADDR_OK);
	CHECK_STR(host, "::1");
	CHECK_INT(port, 65535);

	port = -1;
	strcpy(host, "unchanged");
	CHECK(addr("*-1\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_UNKNOWN);
	CHECK(addr("$-1\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_UNKNOWN);
	CHECK(addr("-NOAUTH Authentication required.\r\n", host, sizeof(host), &port) ==
	      SENTINEL_ADDR_ERROR);
	/* Not an address: wrong shapes, ports, embedded NULs, a host that does not fit. */
	CHECK(addr("*1\r\n$1\r\nh\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	CHECK(addr("*3\r\n$1\r\nh\r\n$1\r\n1\r\n$1\r\n1\r\n", host, sizeof(host), &port) ==
	      SENTINEL_ADDR_BAD);
	CHECK(addr("*2\r\n$1\r\nh\r\n:6379\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	CHECK(addr("*2\r\n$1\r\nh\r\n$1\r\n0\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	CHECK(addr("*2\r\n$1\r\nh\r\n$5\r\n65536\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	CHECK(addr("*2\r\n$1\r\nh\r\n$6\r\n006379\r\n", host, sizeof(host), &port) ==
	      SENTINEL_ADDR_BAD);
	CHECK(addr("*2\r\n$1\r\nh\r\n$3\r\n-12\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	CHECK(addr("*2\r\n$0\r\n\r\n$4\r\n6379\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	CHECK(addr_len("*2\r\n$3\r\na\0b\r\n$4\r\n6379\r\n", 23, host, sizeof(host), &port) ==
	      SENTINEL_ADDR_BAD);
	CHECK(addr("*2\r\n$4\r\nlong\r\n$4\r\n6379\r\n", tiny, sizeof(tiny), &port) ==
	      SENTINEL_ADDR_BAD);
	CHECK(addr("+OK\r\n", host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	CHECK(redis_sentinel_parse_addr(NULL, host, sizeof(host), &port) == SENTINEL_ADDR_BAD);
	/* Nothing written on failure. */
	CHECK_STR(host, "unchanged");
	CHECK_INT(port, -1);
}

static bool role(const char *resp, const char *want_word)
{
	redisReply *r = rd(resp);
	char word[64];
	bool master = redis_sentinel_parse_role(r, word, sizeof(word));

	if (strcmp(word, want_word) != 0) {
		printf("# role word \"%s\", want \"%s\"\n", word, want_word);
		master = !master; /* make the check fail */
	}
	freeReplyObject(r);
	return master;
}

TEST(role)
{
	char word[8] = "x";

	CHECK(role("*3\r\n$6\r\nmaster\r\n:3129659\r\n*0\r\n", "master"));
	CHECK(!role("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6380\r\n$9\r\nconnected\r\n:1\r\n",
	            "slave"));
	CHECK(!role("*2\r\n$8\r\nsentinel\r\n*0\r\n", "sentinel"));
	CHECK(!role("*1\r\n$7\r\nmasters\r\n", "masters"));
	CHECK(!role("-NOPERM this user has no permissions to run the 'role' command\r\n",
	            "NOPERM this user has no permissions to run the 'role' command"));
	CHECK(!role("*0\r\n", ""));
	CHECK(!role("*1\r\n:1\r\n", ""));
	CHECK(!role("+master\r\n", ""));
	CHECK(!redis_sentinel_parse_role(NULL, word, sizeof(word)));
	CHECK_STR(word, "");
}

TEST(distrust_first)
{
	struct redis_seed seeds[3] = {{"a", 1}, {"b", 2}, {"c", 3}};
	struct redis_target t = {.sentinel = true, .seeds = seeds, .nseeds = 3};
	const struct redis_target *ct = &t;

	redis_sentinel_distrust_first(ct);
	CHECK_STR(seeds[0].host, "b");
	CHECK_STR(seeds[1].host, "c");
	CHECK_STR(seeds[2].host, "a");
	CHECK_INT(seeds[2].port, 1);
	t.nseeds = 1;
	redis_sentinel_distrust_first(ct);
	CHECK_STR(seeds[0].host, "b");
}

int main(void)
{
	RUN(addr);
	RUN(role);
	RUN(distrust_first);
	return test_done();
}
