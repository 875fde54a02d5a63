/*
 * redis_tls.h - TLS to Redis (rediss://) on top of hiredis_ssl.
 *
 * Built only when meson found hiredis_ssl >= 1.0 and OpenSSL (HAVE_HIREDIS_SSL);
 * otherwise every entry point reports that this build has no TLS, so a
 * rediss:// URL fails at startup with a message that names the fix.
 *
 * The relay owns each connection's SSL object (hiredis takes it over with
 * redisInitiateSSL and frees it with the context). That way the peer's name is
 * checked by OpenSSL itself (hiredis checks only the chain), and the relay's
 * pipelined, non-blocking loop can read and write the TLS stream directly,
 * without copying its send buffer into hiredis's.
 */
#ifndef RELAY_REDIS_TLS_H
#define RELAY_REDIS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "redis_url.h"

struct redisContext;

/* True when this build can speak TLS to Redis. */
bool redis_tls_available(void);
/* "OpenSSL 3.0.x ..." or "none", for --version. */
const char *redis_tls_library(void);

/*
 * Start TLS on c, a connected, still blocking context, to the server named
 * host (what the certificate must name unless t->tls_server_name is set), then
 * PING through it so that a server that wants a client certificate says so
 * now. On success *ssl_out is the SSL object, owned by c: pass it to
 * redis_tls_read/redis_tls_write once the socket is non-blocking. On failure
 * returns false, writes one line to err and sets *permanent when retrying
 * cannot help (bad certificate files, a certificate that does not verify, no
 * TLS in this build).
 */
bool redis_tls_start(struct redisContext *c, const struct redis_target *t, const char *host,
                     void **ssl_out, bool *permanent, char *err, size_t errlen);

/*
 * read(2)/write(2) over TLS on a non-blocking socket: > 0 bytes moved; 0 from
 * read when the server closed the session; -1 with errno EAGAIN when the call
 * must wait, where *want_other says it waits for the other direction (a write
 * that needs the socket readable, a read that needs it writable); -1 with
 * errno EIO and err set on a TLS error. A write that returned EAGAIN must be
 * repeated with the same bytes.
 */
/* Bytes TLS has decrypted (or read) but not handed out yet: poll() does not see them. */
bool redis_tls_pending(void *ssl);

ssize_t redis_tls_read(void *ssl, void *buf, size_t len, bool *want_other, char *err,
                       size_t errlen);
ssize_t redis_tls_write(void *ssl, const void *buf, size_t len, bool *want_other, char *err,
                        size_t errlen);

#endif
