/*
 * test_redis_conn.c - unit tests for lib/redis_conn.c: the one rule for
 * error replies no retry can fix (the texts are Redis 5 to 7's own), the fix
 * each names, and the connect failures that need no server.
 */
#include "redis_conn.h"

#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "redis_tls.h"
#include "test.h"

static const char *const permanent[] = {
    "WRONGPASS invalid username-password pair or user is disabled.",
    "NOAUTH Authentication required.",
    "ERR invalid password",
    "ERR invalid username-password pair",
    "NOPERM User outbox-relay has no permissions to run the 'select' command",
    "ERR AUTH <password> called without any password configured for the default user. Are you "
    "sure your configuration is correct?",
    "ERR DB index is out of range",
    "ERR wrong number of arguments for 'auth' command",
};

static const char *const transient[] = {
    "LOADING Redis is loading the dataset in memory",
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "READONLY You can't write against a read only replica.",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "CLUSTERDOWN The cluster is down",
    "ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' ",
    "ERR Error running script: wrong number of arguments",
    "",
};

TEST(permanent_replies)
{
	for (size_t i = 0; i < sizeof(permanent) / sizeof(permanent[0]); i++) {
		if (!redis_conn_error_permanent(permanent[i]))
			printf("# not permanent: %s\n", permanent[i]);
		CHECK(redis_conn_error_permanent(permanent[i]));
	}
}

TEST(transient_replies)
{
	for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++) {
		if (redis_conn_error_permanent(transient[i]))
			printf("# permanent: %s\n", transient[i]);
		CHECK(!redis_conn_error_permanent(transient[i]));
	}
	CHECK(!redis_conn_error_permanent(NULL));
}

/* Each fix names what to change. */
TEST(hints)
{
	CHECK(strstr(redis_conn_error_hint(permanent[0]), "--redis-url"));
	CHECK(strstr(redis_conn_error_hint(permanent[0]), "--redis-password-file"));
	CHECK(strstr(redis_conn_error_hint(permanent[1]), "password"));
	CHECK(strstr(redis_conn_error_hint(permanent[4]), "deploy/redis/users.acl"));
	CHECK(strstr(redis_conn_error_hint(permanent[5]), "drop the password from --redis-url"));
	CHECK(strstr(redis_conn_error_hint(permanent[5]), "requirepass"));
	CHECK(strstr(redis_conn_error_hint(permanent[6]), "--redis-url"));
	CHECK(strstr(redis_conn_error_hint(permanent[6]), "databases"));
	CHECK(strstr(redis_conn_error_hint(permanent[7]), "Redis 6"));
	CHECK(redis_conn_error_hint("LOADING") != NULL);
}

/* No server at the socket: retried, the message says so and names no password. */
TEST(connect_refused)
{
	char dir[] = "/tmp/test_redis_conn.XXXXXX", path[64], err[512];
	struct redis_target t = {.unix_path = path, .password = "s3cret-unit", .db = 3};
	struct redis_conn rc = {0};

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/none.sock", dir);
	CHECK(redis_conn_open(&rc, &t, NULL, 0, path, 500, err, sizeof(err)) == REDIS_CONN_RETRY);
	CHECK(rc.c == NULL);
	CHECK(strstr(err, "could not connect to Redis") != NULL);
	CHECK(strstr(err, "s3cret-unit") == NULL);
	CHECK(redis_conn_connect(&rc, &t, 500, err, sizeof(err)) == REDIS_CONN_RETRY);
	CHECK(strstr(err, "Redis at ") == err);
	CHECK(strstr(err, path) != NULL);
	CHECK(strstr(err, "s3cret-unit") == NULL);
	redis_conn_close(&rc); /* a closed connection: no-op */
	CHECK(rc.c == NULL && rc.ssl == NULL && rc.ops == NULL);
	rmdir(dir);
}

/* rediss:// in a build without TLS: permanent, before any connect. */
TEST(tls_unavailable)
{
	struct redis_target t = {.host = "127.0.0.1", .port = 1, .tls = true};
	struct redis_conn rc = {0};
	char err[512];

	if (redis_tls_available())
		return; /* the TLS build: 47_redis_tls covers TLS */
	CHECK(redis_conn_open(&rc, &t, t.host, t.port, NULL, 500, err, sizeof(err)) ==
	      REDIS_CONN_PERMANENT);
	CHECK(strstr(err, "not supported by this build") != NULL);
}

int main(void)
{
	RUN(permanent_replies);
	RUN(transient_replies);
	RUN(hints);
	RUN(connect_refused);
	RUN(tls_unavailable);
	return test_done();
}
