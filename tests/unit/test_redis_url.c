/*
 * test_redis_url.c - unit tests for lib/redis_url.c: every accepted form of
 * --redis-url, the error messages, and that no password ever reaches err.
 */
#include "redis_url.h"

#include <stdbool.h>

#include "test.h"

#define SECRET "Sup3rS3cret"

/* True when every field of t is zero/NULL. */
static bool is_zeroed(const struct redis_target *t)
{
	return !t->host && !t->unix_path && !t->user && !t->password && t->port == 0 && t->db == 0 &&
	       !t->tls;
}

/*
 * Parse url expecting failure; err must contain want and never SECRET, and
 * the target must come back zeroed.
 */
static bool fails_with(const char *url, const char *want)
{
	struct redis_target t;
	char err[256];
	bool ok = true;
	const char *shown = url ? url : "(null)";

	memset(&t, 0xAB, sizeof(t));
	memset(err, 0, sizeof(err));
	if (redis_url_parse(url, &t, err, sizeof(err))) {
		printf("# \"%s\" parsed, expected an error\n", shown);
		redis_target_finish(&t);
		return false;
	}
	if (!strstr(err, want)) {
		printf("# \"%s\": err \"%s\" lacks \"%s\"\n", shown, err, want);
		ok = false;
	}
	if (strstr(err, SECRET) || strchr(err, '\n')) {
		printf("# \"%s\": err \"%s\" leaks the password or spans lines\n", shown, err);
		ok = false;
	}
	if (!is_zeroed(&t)) {
		printf("# \"%s\": target not zeroed on failure\n", shown);
		ok = false;
	}
	return ok;
}

TEST(tcp_defaults)
{
	struct redis_target t;
	char err[256];

	CHECK(redis_url_parse("redis://localhost", &t, err, sizeof(err)));
	CHECK_STR(t.host, "localhost");
	CHECK_INT(t.port, 6379);
	CHECK_INT(t.db, 0);
	CHECK(t.unix_path == NULL);
	CHECK(t.user == NULL);
	CHECK(t.password == NULL);
	CHECK(!t.tls);
	redis_target_finish(&t);

	CHECK(redis_url_parse("redis://127.0.0.1:6379", &t, err, sizeof(err)));
	CHECK_STR(t.host, "127.0.0.1");
	CHECK_INT(t.port, 6379);
	redis_target_finish(&t);

	/* A trailing slash means database 0. */
	CHECK(redis_url_parse("redis://h/", &t, err, sizeof(err)));
	CHECK_STR(t.host, "h");
	CHECK_INT(t.db, 0);
	redis_target_finish(&t);
}

TEST(tcp_port_db)
{
	struct redis_target t;
	char err[256];

	CHECK(redis_url_parse("redis://cache.internal:6380/2", &t, err, sizeof(err)));
	CHECK_STR(t.host, "cache.internal");
	CHECK_INT(t.port, 6380);
	CHECK_INT(t.db, 2);
	redis_target_finish(&t);

	CHECK(redis_url_parse("redis://h:1/2147483647", &t, err, sizeof(err)));
	CHECK_INT(t.port, 1);
	CHECK_INT(t.db, 2147483647);
	redis_target_finish(&t);

	CHECK(redis_url_parse("redis://h:65535/0", &t, err, sizeof(err)));
	CHECK_INT(t.port, 65535);
	redis_target_finish(&t);

	/* Scheme is case-insensitive. */
	CHECK(redis_url_parse("REDIS://my-host_1:7000", &t, err, sizeof(err)));
	CHECK_STR(t.host, "my-host_1");
	CHECK_INT(t.port, 7000);
	redis_target_finish(&t);
}

TEST(ipv6)
{
	struct redis_target t;
	char err[256], buf[128];

	CHECK(redis_url_parse("redis://[::1]:6380/3", &t, err, sizeof(err)));
	CHECK_STR(t.host, "::1");
	CHECK_INT(t.port, 6380);
	CHECK_INT(t.db, 3);
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)), "[::1]:6380/3");
	redis_target_finish(&t);

	CHECK(redis_url_parse("redis://[2001:db8::10]", &t, err, sizeof(err)));
	CHECK_STR(t.host, "2001:db8::10");
	CHECK_INT(t.port, 6379);
	redis_target_finish(&t);

	CHECK(redis_url_parse("redis://:pw@[::ffff:10.0.0.1]:6379", &t, err, sizeof(err)));
	CHECK_STR(t.host, "::ffff:10.0.0.1");
	CHECK_STR(t.password, "pw");
	redis_target_finish(&t);
}

TEST(tls)
{
	struct redis_target t;
	char err[256];

	CHECK(redis_url_parse("rediss://secure.example:6380", &t, err, sizeof(err)));
	CHECK(t.tls);
	CHECK_STR(t.host, "secure.example");
	CHECK_INT(t.port, 6380);
	redis_target_finish(&t);

	CHECK(redis_url_parse("redis://h", &t, err, sizeof(err)));
	CHECK(!t.tls);
	redis_target_finish(&t);

	CHECK(redis_url_parse("rediss-cluster://a.example:7000,b.example:7001", &t, err, sizeof(err)));
	CHECK(t.tls);
	CHECK(t.cluster);
	CHECK_INT((int)t.nseeds, 2);
	CHECK_STR(t.seeds[1].host, "b.example");
	CHECK_INT(t.seeds[1].port, 7001);
	redis_target_finish(&t);
}

TEST(sentinel)
{
	struct redis_target t;
	char err[256], buf[300];

	CHECK(redis_url_parse(
	    "redis-sentinel://app:p%40ss@10.0.0.1:26379,[::1]:26380,s3.example:26381/2#my%23master", &t,
	    err, sizeof(err)));
	CHECK(t.sentinel);
	CHECK(!t.cluster);
	CHECK(!t.tls);
	CHECK_INT((int)t.nseeds, 3);
	CHECK_STR(t.seeds[0].host, "10.0.0.1");
	CHECK_INT(t.seeds[0].port, 26379);
	CHECK_STR(t.seeds[1].host, "::1");
	CHECK_INT(t.seeds[1].port, 26380);
	CHECK_STR(t.seeds[2].host, "s3.example");
	CHECK_STR(t.master_name, "my#master");
	CHECK_INT(t.db, 2);
	CHECK_STR(t.user, "app");
	CHECK_STR(t.password, "p@ss");
	CHECK_STR(t.host, "10.0.0.1");
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)),
	          "master \"my#master\"/2 via Sentinel 10.0.0.1:26379 (3 Sentinels)");
	redis_target_finish(&t);

	/* An '@' in the master name is not the end of the credentials. */
	CHECK(redis_url_parse("rediss-sentinel://:pw@h:26379#a@b", &t, err, sizeof(err)));
	CHECK(t.tls);
	CHECK(t.sentinel);
	CHECK(t.user == NULL);
	CHECK_STR(t.password, "pw");
	CHECK_STR(t.master_name, "a@b");
	CHECK_INT(t.db, 0);
	CHECK_INT((int)t.nseeds, 1);
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)),
	          "master \"a@b\"/0 via Sentinel h:26379 (1 Sentinel) over TLS");
	redis_target_finish(&t);

	CHECK(fails_with("redis-sentinel://h:26379", "missing master name"));
	CHECK(fails_with("redis-sentinel://u:" SECRET "@h:26379/1#", "missing master name"));
	CHECK(fails_with("redis-sentinel://#m", "missing Sentinel address"));
	CHECK(fails_with("redis-sentinel://a:1/3,b:2#m", "invalid database"));
	CHECK(fails_with("redis-sentinel://a:1,b:x#m", "invalid port"));
	CHECK(fails_with("redis-sentinel://h:1/x#m", "invalid database \"x\""));
	CHECK(fails_with("redis-sentinel://h:1#m%zz", "invalid percent-encoding in the master name"));
	CHECK(fails_with("redis-sentinel://a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9,j:10,k:11,l:12,m:13,"
	                 "n:14,o:15,p:16,q:17#m",
	                 "too many Sentinels (17)"));
}

TEST(tls_options)
{
	struct redis_target t;
	char err[256];
	const char *readable = "/dev/null"; /* any file that opens */

	/* Attached to a rediss:// target, copied, freed by redis_target_finish. */
	CHECK(redis_url_parse("rediss://h:6380", &t, err, sizeof(err)));
	CHECK(
	    redis_target_set_tls(&t, readable, readable, readable, "redis.internal", err, sizeof(err)));
	CHECK_STR(t.tls_ca_file, readable);
	CHECK_STR(t.tls_cert_file, readable);
	CHECK_STR(t.tls_key_file, readable);
	CHECK_STR(t.tls_server_name, "redis.internal");
	/* Empty values mean "not given". */
	CHECK(redis_target_set_tls(&t, "", NULL, NULL, "", err, sizeof(err)));
	CHECK(t.tls_ca_file == NULL && t.tls_cert_file == NULL && t.tls_server_name == NULL);
	/* Cert and key go together. */
	CHECK(!redis_target_set_tls(&t, NULL, readable, NULL, NULL, err, sizeof(err)));
	CHECK(strstr(err, "--redis-tls-cert-file and --redis-tls-key-file go together") != NULL);
	CHECK(!redis_target_set_tls(&t, NULL, NULL, readable, NULL, err, sizeof(err)));
	/* A file that cannot be read is named with the option. */
	CHECK(!redis_target_set_tls(&t, "/nonexistent/ca.pem", NULL, NULL, NULL, err, sizeof(err)));
	CHECK(strstr(err, "cannot read --redis-tls-ca-file \"/nonexistent/ca.pem\"") != NULL ||
	      strstr(err, "cannot read --redis-tls-ca-file /nonexistent/ca.pem") != NULL);
	CHECK(strstr(err, "No such file") != NULL);
	redis_target_finish(&t);

	/* Any TLS option on a plain target is refused, naming it. */
	CHECK(redis_url_parse("redis://h", &t, err, sizeof(err)));
	CHECK(redis_target_set_tls(&t, NULL, NULL, NULL, NULL, err, sizeof(err)));
	CHECK(!redis_target_set_tls(&t, NULL, NULL, NULL, "x", err, sizeof(err)));
	CHECK(strstr(err, "--redis-tls-server-name applies only to TLS") != NULL);
	redis_target_finish(&t);
	CHECK(redis_url_parse("unix:///s.sock", &t, err, sizeof(err)));
	CHECK(!redis_target_set_tls(&t, readable, NULL, NULL, NULL, err, sizeof(err)));
	CHECK(strstr(err, "--redis-tls-ca-file applies only to TLS") != NULL);
	redis_target_finish(&t);
}

TEST(credentials)
{
	struct redis_target t;
	char err[256];

	CHECK(redis_url_parse("redis://relay:" SECRET "@h:6379/1", &t, err, sizeof(err)));
	CHECK_STR(t.user, "relay");
	CHECK_STR(t.password, SECRET);
	CHECK_STR(t.host, "h");
	CHECK_INT(t.db, 1);
	redis_target_finish(&t);

	/* Password only (requirepass / default user). */
	CHECK(redis_url_parse("redis://:" SECRET "@h", &t, err, sizeof(err)));
	CHECK(t.user == NULL);
	CHECK_STR(t.password, SECRET);
	redis_target_finish(&t);

	/* Empty parts count as absent. */
	CHECK(redis_url_parse("redis://:@h", &t, err, sizeof(err)));
	CHECK(t.user == NULL);
	CHECK(t.password == NULL);
	redis_target_finish(&t);

	/* The password may contain ':' and (unencoded) '@' and '/'. */
	CHECK(redis_url_parse("redis://u:a:b@c/d@h:1/2", &t, err, sizeof(err)));
	CHECK_STR(t.user, "u");
	CHECK_STR(t.password, "a:b@c/d");
	CHECK_STR(t.host, "h");
	CHECK_INT(t.port, 1);
	CHECK_INT(t.db, 2);
	redis_target_finish(&t);
}

TEST(percent_decoding)
{
	struct redis_target t;
	char err[256];

	CHECK(redis_url_parse("redis://us%3Aer:p%40ss%2fw%25rd%7E@h", &t, err, sizeof(err)));
	CHECK_STR(t.user, "us:er");
	CHECK_STR(t.password, "p@ss/w%rd~");
	redis_target_finish(&t);

	CHECK(redis_url_parse("redis://:%40@h", &t, err, sizeof(err)));
	CHECK_STR(t.password, "@");
	redis_target_finish(&t);
}

TEST(unix_sockets)
{
	struct redis_target t;
	char err[256], buf[128];

	CHECK(redis_url_parse("unix:///run/redis/redis.sock", &t, err, sizeof(err)));
	CHECK_STR(t.unix_path, "/run/redis/redis.sock");
	CHECK(t.host == NULL);
	CHECK_INT(t.db, 0);
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)), "unix:/run/redis/redis.sock");
	redis_target_finish(&t);

	CHECK(redis_url_parse("unix:///tmp/r.sock?db=5", &t, err, sizeof(err)));
	CHECK_STR(t.unix_path, "/tmp/r.sock");
	CHECK_INT(t.db, 5);
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)), "unix:/tmp/r.sock?db=5");
	redis_target_finish(&t);

	CHECK(redis_url_parse("unix://relay:" SECRET "@/tmp/r.sock?db=1", &t, err, sizeof(err)));
	CHECK_STR(t.user, "relay");
	CHECK_STR(t.password, SECRET);
	CHECK_STR(t.unix_path, "/tmp/r.sock");
	CHECK_INT(t.db, 1);
	redis_target_finish(&t);

	/* Bare path shorthand. */
	CHECK(redis_url_parse("/var/run/redis.sock", &t, err, sizeof(err)));
	CHECK_STR(t.unix_path, "/var/run/redis.sock");
	CHECK(t.host == NULL);
	CHECK(!t.tls);
	redis_target_finish(&t);

	CHECK(redis_url_parse("/tmp/x.sock?db=2", &t, err, sizeof(err)));
	CHECK_STR(t.unix_path, "/tmp/x.sock");
	CHECK_INT(t.db, 2);
	redis_target_finish(&t);

	/* systemd template instances put '@' in paths. */
	CHECK(redis_url_parse("unix:///run/redis@main/redis.sock", &t, err, sizeof(err)));
	CHECK_STR(t.unix_path, "/run/redis@main/redis.sock");
	CHECK(t.password == NULL);
	redis_target_finish(&t);
	CHECK(redis_url_parse("unix://:pw@/run/redis@main/redis.sock", &t, err, sizeof(err)));
	CHECK_STR(t.unix_path, "/run/redis@main/redis.sock");
	CHECK_STR(t.password, "pw");
	redis_target_finish(&t);
}

TEST(describe)
{
	struct redis_target t;
	char err[256], buf[128], tiny[6];

	CHECK(redis_url_parse("rediss://admin:" SECRET "@db.example:6390/4", &t, err, sizeof(err)));
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)), "db.example:6390/4 over TLS");
	CHECK(!strstr(buf, SECRET));
	CHECK(!strstr(buf, "admin"));
	/* Truncates, stays NUL-terminated. */
	CHECK_STR(redis_target_describe(&t, tiny, sizeof(tiny)), "db.ex");
	redis_target_finish(&t);

	CHECK(redis_url_parse("unix://:" SECRET "@/s.sock", &t, err, sizeof(err)));
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)), "unix:/s.sock");
	redis_target_finish(&t);

	CHECK_STR(redis_target_describe(NULL, buf, sizeof(buf)), "(none)");
	memset(&t, 0, sizeof(t));
	CHECK_STR(redis_target_describe(&t, buf, sizeof(buf)), "(none)");
	CHECK(redis_target_describe(&t, buf, 0) == buf);
}

TEST(errors_scheme)
{
	CHECK(fails_with("http://x", "unsupported scheme \"http\": use redis://, rediss://, unix://, "
	                             "redis-cluster://, rediss-cluster://, redis-sentinel:// or "
	                             "rediss-sentinel://"));
	CHECK(fails_with("http://u:" SECRET "@x", "unsupported scheme \"http\""));
	CHECK(fails_with("redis+sentinel://h", "unsupported scheme \"redis+sentinel\""));
	CHECK(fails_with("localhost:6379", "expected a URL such as redis://127.0.0.1:6379"));
	CHECK(fails_with("", "empty URL"));
	CHECK(fails_with(NULL, "empty URL"));
	/* Something that is not a scheme is not quoted. */
	CHECK(fails_with("u:" SECRET "://h", "unsupported scheme: use redis://"));
}

TEST(errors_host)
{
	CHECK(fails_with("redis://", "empty host"));
	CHECK(fails_with("redis://:6379", "empty host"));
	CHECK(fails_with("redis:///0", "empty host"));
	CHECK(fails_with("redis://:" SECRET "@", "empty host"));
	CHECK(fails_with("redis://:" SECRET "@:6379/0", "empty host"));
	CHECK(fails_with("redis://ho st", "invalid host \"ho st\""));
	CHECK(fails_with("redis://h?db=1", "invalid host"));
	CHECK(fails_with("redis://::1:6379", "IPv6 addresses must be written in brackets"));
	CHECK(fails_with("redis://[::1", "missing \"]\""));
	CHECK(fails_with("redis://u:" SECRET "@[::1", "missing \"]\""));
	CHECK(fails_with("redis://[]:6379", "empty IPv6 address"));
	CHECK(fails_with("redis://[::1]x", "unexpected text after \"]\""));
	CHECK(fails_with("redis://[localhost]", "invalid IPv6 address \"localhost\""));
	CHECK(fails_with("redis://[::g]", "invalid IPv6 address"));
}

TEST(errors_port_db)
{
	CHECK(fails_with("redis://h:abc", "invalid port: expected a number from 1 to 65535"));
	CHECK(fails_with("redis://h:0", "invalid port \"0\": expected a number from 1 to 65535"));
	CHECK(fails_with("redis://h:65536", "invalid port \"65536\""));
	CHECK(fails_with("redis://h:99999999999999999999", "invalid port"));
	CHECK(fails_with("redis://h:-1", "invalid port"));
	CHECK(fails_with("redis://h:+1", "invalid port"));
	CHECK(fails_with("redis://h:", "missing port after \":\""));
	CHECK(fails_with("redis://[::1]:", "missing port"));
	CHECK(fails_with("redis://[::1]:x1", "invalid port"));
	CHECK(fails_with("redis://h:6379?db=1", "invalid port"));
	CHECK(fails_with("redis://h/abc",
	                 "invalid database \"abc\": expected a number from 0 to 2147483647"));
	CHECK(fails_with("redis://h/-1", "invalid database \"-1\""));
	CHECK(fails_with("redis://h/2147483648", "invalid database \"2147483648\""));
	CHECK(fails_with("redis://h/1/2", "invalid database \"1/2\""));
	CHECK(fails_with("redis://u:" SECRET "@h/x", "invalid database \"x\""));
}

TEST(errors_credentials)
{
	CHECK(fails_with("redis://" SECRET "@h", "missing \":\" in the credentials"));
	CHECK(fails_with("redis://u:" SECRET "%zz@h", "invalid percent-encoding in the credentials"));
	CHECK(fails_with("redis://u:" SECRET "%4@h", "invalid percent-encoding"));
	CHECK(fails_with("redis://u:" SECRET "%@h", "invalid percent-encoding"));
	CHECK(fails_with("redis://u%zz:" SECRET "@h", "invalid percent-encoding"));
	CHECK(fails_with("redis://u:" SECRET "%00@h", "must not contain %00"));
	/* "@host" forgotten: the password sits where the port goes. */
	CHECK(fails_with("redis://u:" SECRET, "invalid port:"));
	CHECK(fails_with("rediss://default:" SECRET, "invalid port:"));
}

TEST(errors_unix)
{
	char longpath[300];

	CHECK(fails_with("unix://", "missing socket path"));
	CHECK(fails_with("unix://?db=1", "missing socket path"));
	CHECK(fails_with("unix://relative.sock", "socket path must be absolute"));
	CHECK(fails_with("unix://u:" SECRET "@relative.sock", "socket path must be absolute"));
	CHECK(fails_with("unix:///tmp/r.sock?db=x", "invalid database \"x\""));
	CHECK(fails_with("unix:///tmp/r.sock?db=", "invalid database \"\""));
	CHECK(
	    fails_with("unix:///tmp/r.sock?timeout=1", "unsupported query \"timeout=1\": only ?db=N"));
	CHECK(fails_with("unix://:" SECRET "%zz@/tmp/r.sock", "invalid percent-encoding"));
	memset(longpath, 'a', sizeof(longpath));
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	CHECK(fails_with(longpath, "socket path is too long"));
}

TEST(errors_are_bounded)
{
	struct redis_target t;
	char err[16];
	char big[400];

	/* A tiny err buffer is NUL-terminated, never overrun. */
	CHECK(!redis_url_parse("http://x", &t, err, sizeof(err)));
	CHECK_INT(strlen(err), sizeof(err) - 1);
	/* NULL err is allowed. */
	CHECK(!redis_url_parse("http://x", &t, NULL, 0));

	/* Long junk is cut when quoted back; control bytes do not break the line. */
	memset(big, 'x', sizeof(big));
	memcpy(big, "redis://h:1/", 12);
	big[20] = '\n';
	big[sizeof(big) - 1] = '\0';
	CHECK(fails_with(big, "invalid database \"xxxxxxxx?xxx"));
	{
		char e[512];

		CHECK(!redis_url_parse(big, &t, e, sizeof(e)));
		CHECK(strlen(e) < 150);
		CHECK(strstr(e, "...\""));
	}
}

TEST(finish)
{
	struct redis_target t;
	char err[256];

	redis_target_finish(NULL);
	CHECK(redis_url_parse("redis://u:p@h", &t, err, sizeof(err)));
	redis_target_finish(&t);
	CHECK(is_zeroed(&t));
	redis_target_finish(&t); /* twice is fine */
	CHECK(is_zeroed(&t));
}

int main(void)
{
	RUN(tcp_defaults);
	RUN(tcp_port_db);
	RUN(sentinel);
	RUN(ipv6);
	RUN(tls);
	RUN(tls_options);
	RUN(credentials);
	RUN(percent_decoding);
	RUN(unix_sockets);
	RUN(describe);
	RUN(errors_scheme);
	RUN(errors_host);
	RUN(errors_port_db);
	RUN(errors_credentials);
	RUN(errors_unix);
	RUN(errors_are_bounded);
	RUN(finish);
	return test_done();
}
