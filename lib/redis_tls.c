/*
 * redis_tls.c - TLS to Redis through hiredis_ssl and OpenSSL. See redis_tls.h.
 */
#include "redis_tls.h"

#include "relay_build.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "msg.h"

#if HAVE_HIREDIS_SSL

#include <arpa/inet.h>
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

bool redis_tls_available(void)
{
	return true;
}

const char *redis_tls_library(void)
{
	return OpenSSL_version(OPENSSL_VERSION);
}

/* The reason of the newest queued OpenSSL error, or fallback. */
static const char *ssl_reason(const char *fallback)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	return r ? r : fallback;
}

static bool is_ip(const char *host)
{
	unsigned char a[16];

	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

/* Set on a session whose server asked for a client certificate we do not have. */
static char cert_asked;

static int no_client_cert(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
	(void)x509;
	(void)pkey;
	SSL_set_app_data(ssl, &cert_asked);
	return 0; /* send none; the server decides whether that is fatal */
}

/* A context with the trust store and client certificate of t; NULL with err set. */
static SSL_CTX *make_ctx(const struct redis_target *t, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	if (!ctx) {
		msg_set(err, errlen, "could not create a TLS context: %s", ssl_reason("out of memory"));
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (t->tls_ca_file) {
		if (SSL_CTX_load_verify_locations(ctx, t->tls_ca_file, NULL) != 1) {
			msg_set(err, errlen,
			        "--redis-tls-ca-file %s holds no usable PEM certificate (%s): give the "
			        "CA bundle that signed the Redis server's certificate",
			        t->tls_ca_file, ssl_reason("unreadable"));
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		msg_set(err, errlen,
		        "could not load the system's CA certificates (%s): give "
		        "--redis-tls-ca-file",
		        ssl_reason("unknown error"));
		goto fail;
	}
	if (t->tls_cert_file) {
		if (SSL_CTX_use_certificate_chain_file(ctx, t->tls_cert_file) != 1) {
			msg_set(err, errlen, "--redis-tls-cert-file %s is not a PEM certificate (%s)",
			        t->tls_cert_file, ssl_reason("unreadable"));
			goto fail;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, t->tls_key_file, SSL_FILETYPE_PEM) != 1) {
			msg_set(err, errlen, "--redis-tls-key-file %s is not a PEM private key (%s)",
			        t->tls_key_file, ssl_reason("unreadable"));
			goto fail;
		}
		if (SSL_CTX_check_private_key(ctx) != 1) {
			msg_set(err, errlen,
			        "--redis-tls-key-file %s does not belong to --redis-tls-cert-file %s",
			        t->tls_key_file, t->tls_cert_file);
			goto fail;
		}
	} else {
		SSL_CTX_set_client_cert_cb(ctx, no_client_cert);
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* See redis_tls.h. */
bool redis_tls_start(struct redisContext *c, const struct redis_target *t, const char *host,
                     void **ssl_out, bool *permanent, char *err, size_t errlen)
{
	const char *name = t->tls_server_name ? t->tls_server_name : host;
	SSL_CTX *ctx;
	SSL *ssl;
	redisReply *r;
	bool ok;

	*ssl_out = NULL;
	*permanent = true; /* until the handshake: file and name problems stay */
	ERR_clear_error();
	ctx = make_ctx(t, err, errlen);
	if (!ctx)
		return false;
	ssl = SSL_new(ctx);
	SSL_CTX_free(ctx); /* ssl holds its own reference */
	if (!ssl) {
		msg_set(err, errlen, "could not create a TLS session: %s", ssl_reason("out of memory"));
		*permanent = false;
		return false;
	}
	/* Check the certificate's name (or address) as well as its chain. */
	if (is_ip(name)) {
		ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
	} else {
		ok = SSL_set1_host(ssl, name) == 1 && SSL_set_tlsext_host_name(ssl, name) == 1;
	}
	if (!ok) {
		msg_set(err, errlen, "cannot check TLS server name \"%s\": %s", name,
		        ssl_reason("invalid name"));
		SSL_free(ssl);
		return false;
	}
	ERR_clear_error();
	if (redisInitiateSSL(c, ssl) != REDIS_OK) {
		long v = SSL_get_verify_result(ssl);

		if (v != X509_V_OK) {
			msg_set(err, errlen,
			        "the TLS certificate of the Redis server was not accepted for \"%s\": %s "
			        "(give the CA that signed it with --redis-tls-ca-file, or the name it "
			        "carries with --redis-tls-server-name)",
			        name, X509_verify_cert_error_string(v));
		} else {
			msg_set(err, errlen, "TLS handshake failed: %s (is the server's port a TLS port?)",
			        c->errstr[0] ? c->errstr : ssl_reason("unknown error"));
			*permanent = ERR_peek_last_error() != 0; /* a protocol verdict, not a lost link */
		}
		SSL_free(ssl); /* hiredis took it over only on success */
		return false;
	}
	/* In TLS 1.3 the server judges the client certificate after the handshake. */
	ERR_clear_error();
	r = redisCommand(c, "PING");
	if (!r) {
		unsigned long e = ERR_peek_last_error();

		/* The alert can be lost to a connection reset; that the server
		 * asked for a certificate we lack is known either way. */
		if ((e && ERR_GET_REASON(e) == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) ||
		    SSL_get_app_data(ssl) == &cert_asked) {
			msg_set(err, errlen,
			        "the Redis server requires a client certificate: give "
			        "--redis-tls-cert-file and --redis-tls-key-file");
		} else if (e) {
			msg_set(err, errlen,
			        "the Redis server ended the TLS session: %s (check "
			        "--redis-tls-cert-file: is it signed by a CA the server trusts?)",
			        ssl_reason("unknown error"));
		} else {
			msg_set(err, errlen, "PING over TLS failed: %s",
			        c->errstr[0] ? c->errstr : "connection lost");
			*permanent = false;
		}
		return false;
	}
	freeReplyObject(r); /* an error such as NOAUTH is still a TLS success */
	/* The relay retries a write with the same bytes but lets the buffer move. */
	SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	*ssl_out = ssl;
	return true;
}

/* Map an SSL_read/SSL_write result that is not a byte count. */
static ssize_t io_result(SSL *ssl, int rv, int want_same, bool *want_other, char *err,
                         size_t errlen)
{
	int e = SSL_get_error(ssl, rv);

	*want_other = false;
	if (e == want_same) {
		errno = EAGAIN;
		return -1;
	}
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		*want_other = true;
		errno = EAGAIN;
		return -1;
	}
	if (e == SSL_ERROR_ZERO_RETURN)
		return 0;
	if (e == SSL_ERROR_SYSCALL && ERR_peek_last_error() == 0) {
		int saved = errno;

		if (rv == 0 || saved == 0)
			return 0; /* the peer closed the socket without close_notify */
		msg_set(err, errlen, "%s", strerror(saved));
		errno = saved;
		return -1;
	}
	msg_set(err, errlen, "TLS error: %s", ssl_reason("unknown error"));
	ERR_clear_error();
	errno = EIO;
	return -1;
}

bool redis_tls_pending(void *ssl)
{
	return SSL_has_pending(ssl) == 1;
}

ssize_t redis_tls_read(void *ssl, void *buf, size_t len, bool *want_other, char *err, size_t errlen)
{
	int rv;

	ERR_clear_error();
	rv = SSL_read(ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (rv > 0) {
		*want_other = false;
		return rv;
	}
	return io_result(ssl, rv, SSL_ERROR_WANT_READ, want_other, err, errlen);
}

ssize_t redis_tls_write(void *ssl, const void *buf, size_t len, bool *want_other, char *err,
                        size_t errlen)
{
	int rv;

	ERR_clear_error();
	rv = SSL_write(ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (rv > 0) {
		*want_other = false;
		return rv;
	}
	return io_result(ssl, rv, SSL_ERROR_WANT_WRITE, want_other, err, errlen);
}

#else /* !HAVE_HIREDIS_SSL */

bool redis_tls_available(void)
{
	return false;
}

const char *redis_tls_library(void)
{
	return "none";
}

bool redis_tls_start(struct redisContext *c, const struct redis_target *t, const char *host,
                     void **ssl_out, bool *permanent, char *err, size_t errlen)
{
	(void)c;
	(void)t;
	(void)host;
	*ssl_out = NULL;
	*permanent = true;
	msg_set(err, errlen,
	        "rediss:// (TLS) is not supported by this build: it was built with hiredis %d.%d "
	        "without hiredis_ssl; use redis:// or unix://, or build against hiredis >= 1.0 "
	        "with TLS (deploy/build-hiredis-tls.sh)",
	        HIREDIS_MAJOR, HIREDIS_MINOR);
	return false;
}

bool redis_tls_pending(void *ssl)
{
	(void)ssl;
	return false;
}

/* Never called: without TLS no session exists to read or write. */
static ssize_t no_tls_io(bool *want_other, char *err, size_t errlen)
{
	*want_other = false;
	msg_set(err, errlen, "no TLS in this build");
	errno = EIO;
	return -1;
}

ssize_t redis_tls_read(void *ssl, void *buf, size_t len, bool *want_other, char *err, size_t errlen)
{
	(void)ssl;
	(void)buf;
	(void)len;
	return no_tls_io(want_other, err, errlen);
}

ssize_t redis_tls_write(void *ssl, const void *buf, size_t len, bool *want_other, char *err,
                        size_t errlen)
{
	(void)ssl;
	(void)buf;
	(void)len;
	return no_tls_io(want_other, err, errlen);
}

#endif
