/*
 * healthcheck.c - outbox-relay-healthcheck: the container image's HEALTHCHECK
 * probe. The runtime image has no shell and no curl, so Docker's HEALTHCHECK
 * runs this instead: it sends GET <path> (default /healthz) to the relay's
 * HTTP endpoint and exits 0 on "200", 1 on anything else (other status,
 * connection refused, no answer within 5 s, endpoint disabled).
 *
 *   outbox-relay-healthcheck [PATH]
 *
 * The address comes from OUTBOX_RELAY_HTTP_ADDR, the variable the relay itself
 * reads (default ":9187"): host:port, :port or [ipv6]:port. A wildcard or empty
 * host means the loopback address; other hosts must be numeric (or localhost),
 * so the probe needs no resolver and links statically:
 *
 *   cc -static -Os -o outbox-relay-healthcheck deploy/healthcheck.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what, const char *detail)
{
	printf("outbox-relay-healthcheck: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	return 1;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/healthz";
	const char *addr = getenv("OUTBOX_RELAY_HTTP_ADDR");
	char host[128], req[512], resp[64];
	struct sockaddr_storage ss;
	socklen_t sslen;
	const char *colon;
	size_t hlen, got = 0;
	long port;
	char *end;
	ssize_t n;
	int fd;

	if (!addr)
		addr = ":9187";
	if (!*addr)
		return fail("OUTBOX_RELAY_HTTP_ADDR is empty: the HTTP endpoint is off", NULL);
	if (path[0] != '/' || strlen(path) > 256 || strpbrk(path, " \r\n"))
		return fail("bad path", path);
	colon = strrchr(addr, ':');
	if (!colon)
		return fail("OUTBOX_RELAY_HTTP_ADDR has no :port", addr);
	port = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port < 1 || port > 65535)
		return fail("bad port in OUTBOX_RELAY_HTTP_ADDR", addr);
	hlen = (size_t)(colon - addr);
	if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']') { /* [ipv6] */
		addr++;
		hlen -= 2;
	}
	if (hlen >= sizeof(host))
		return fail("host too long", addr);
	memcpy(host, addr, hlen);
	host[hlen] = '\0';
	if (!*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "*") || !strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	else if (!strcmp(host, "::"))
		strcpy(host, "::1");

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		((struct sockaddr_in *)&ss)->sin_family = AF_INET;
		((struct sockaddr_in *)&ss)->sin_port = htons((unsigned short)port);
		sslen = sizeof(struct sockaddr_in);
	} else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((unsigned short)port);
		sslen = sizeof(struct sockaddr_in6);
	} else {
		return fail("host in OUTBOX_RELAY_HTTP_ADDR is not a numeric address", host);
	}

	alarm(5); /* the default SIGALRM action ends the probe: unhealthy */
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&ss, sslen) < 0)
		return fail("cannot connect", host);
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n", path,
	         host);
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		return fail("cannot send the request", NULL);
	while (got < sizeof(resp) - 1 && (n = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
		got += (size_t)n;
	resp[got] = '\0';
	close(fd);
	resp[strcspn(resp, "\r\n")] = '\0';
	/* "HTTP/1.1 200 OK" */
	if (strncmp(resp, "HTTP/1.", 7) != 0 || strlen(resp) < 12 || resp[8] != ' ')
		return fail("not an HTTP response", resp);
	printf("%s %s\n", path, resp + 9);
	return strncmp(resp + 9, "200", 3) == 0 && (resp[12] == ' ' || resp[12] == '\0') ? 0 : 1;
}
