/*
 * redis_url.h - parse --redis-url.
 *
 * Accepted forms:
 *   redis://[[user]:password@]host[:port][/db]      (port default 6379, db default 0)
 *   redis://[[user]:password@][ipv6]:port[/db]
 *   unix://[[user]:password@]/path/to/redis.sock[?db=N]
 *   /path/to/redis.sock                             (shorthand for unix://)
 *   redis-cluster://[[user]:password@]host:port[,host:port...]   (cluster seeds; db 0 only)
 *   redis-sentinel://[[user]:password@]host:port[,host:port...][/db]#master-name
 *                                                   (Sentinels; the credentials are the master's)
 *   rediss://..., rediss-cluster://..., rediss-sentinel://...   (the same over TLS: tls = true)
 * User and password are percent-decoded. A build without TLS support refuses
 * tls targets when it connects (see redis_tls.h).
 */
#ifndef RELAY_REDIS_URL_H
#define RELAY_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

/* Most Sentinels a redis-sentinel:// URL may list. */
#define REDIS_SENTINELS_MAX 16

struct redis_seed {
	char *host;
	int port;
};

struct redis_target {
	char *host; /* NULL for unix sockets */
	int port;
	char *unix_path; /* NULL for TCP */
	char *user;      /* NULL when absent */
	char *password;  /* NULL when absent */
	int db;
	bool tls;
	/* TLS files and name, set by redis_target_set_tls (NULL: not given). */
	char *tls_ca_file;   /* CA bundle; default: the system's trust store */
	char *tls_cert_file; /* client certificate (with tls_key_file) */
	char *tls_key_file;
	char *tls_server_name;    /* name the certificate must carry; default: the host */
	bool cluster;             /* redis-cluster://: host/port is the first seed */
	struct redis_seed *seeds; /* cluster seeds or Sentinels (nseeds >= 1 when either) */
	size_t nseeds;
	/*
	 * redis-sentinel://: host/port is the first Sentinel until discovery
	 * (redis_sentinel.h) finds the master; seeds are the Sentinels, the one
	 * that answered last first (the array is reordered through a const target).
	 */
	bool sentinel;
	char *master_name;       /* the #fragment: the name Sentinel monitors */
	char *sentinel_user;     /* --redis-sentinel-user; NULL: AUTH as default */
	char *sentinel_password; /* --redis-sentinel-password(-file); NULL: no AUTH */
};

/*
 * Parse url into *ret (fields malloc'd; free with redis_target_finish).
 * On failure returns false, leaves *ret zeroed, and writes a one-line reason
 * to err that never contains the password.
 */
bool redis_url_parse(const char *url, struct redis_target *ret, char *err, size_t errlen);
void redis_target_finish(struct redis_target *t);
/*
 * A user with an empty password ("redis://user:@host"), after any password
 * file was applied, is an error: AUTH would be skipped and the connection
 * would run as the default user. False with a one-line reason.
 */
bool redis_target_check_auth(const struct redis_target *t, char *err, size_t errlen);
/*
 * Hand the --redis-sentinel-user/-password options to *t, which owns them
 * from then on (*user and *password become NULL; the password is zeroed when
 * freed). Refused, with a one-line reason, for a target that is not
 * redis-sentinel:// and for a user without a password. from_file: the
 * password came from --redis-sentinel-password-file (named in the message).
 */
bool redis_target_take_sentinel_auth(struct redis_target *t, char **user, char **password,
                                     bool from_file, char *err, size_t errlen);
/*
 * Attach the --redis-tls-* options (each may be NULL or empty) to *t. Fails
 * with a one-line reason when one is given for a target without TLS, when
 * only one of cert and key is given, or when a file cannot be read.
 */
bool redis_target_set_tls(struct redis_target *t, const char *ca_file, const char *cert_file,
                          const char *key_file, const char *server_name, char *err, size_t errlen);
/* "host:port/db" or "unix:/path" with no credentials, for logs. Returns buf. */
char *redis_target_describe(const struct redis_target *t, char *buf, size_t len);

/* The value of "field:" (field given with its colon) in an INFO reply, into out ("" when absent).
 */
void redis_info_field(const char *info, const char *field, char *out, size_t outlen);

#endif
