/*
 * sink_node.c - one connection of the sink (the single server, or one
 * cluster master) and the data it owns: its queues (sendq: routed, not yet
 * staged; waitq: what each coming reply answers; durable: executed, waiting
 * for WAIT), the bytes of its write round, and its probes, which are not
 * commands of the ring: WAIT/WAITAOF after a round that wrote, and INFO
 * memory (used_memory and maxmemory, for the metrics). The non-blocking
 * reads and writes from the poll loop, and the stall check.
 */
#include "sink_redis.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink_int.h"

#define WBUF_FILL (256 * 1024) /* bytes staged per write round */

void sink_node_close(struct node *n)
{
	if (n->c) {
		redisFree(n->c);
		n->c = NULL;
	}
	n->sendq.len = n->waitq.len = n->durable.len = 0;
	buf_reset(&n->wbuf);
	n->wsent = 0;
	n->part_seq = 0;
	n->part_off = 0;
	n->staged_publish = false;
	n->wblocked = false;
	n->ssl = NULL;
	n->io = NULL;
	n->w_wants_read = n->r_wants_write = false;
	n->info_due = n->info_sent = n->mem_known = false;
	sink_native_reset(n);
}

/* "host:port" or the unix socket path, for messages. */
const char *sink_node_addr(const struct node *n, char *buf, size_t len)
{
	if (n->unix_path)
		snprintf(buf, len, "%s", n->unix_path);
	else
		snprintf(buf, len, "%s:%d", n->host, n->port);
	return buf;
}

void sink_node_finish(struct node *n)
{
	sink_node_close(n);
	ring_finish(&n->sendq);
	ring_finish(&n->waitq);
	ring_finish(&n->durable);
	buf_finish(&n->wbuf);
	sink_native_free(n);
	free(n->host);
	free(n->unix_path);
	memset(n, 0, sizeof(*n));
}

static bool node_wants_write(const struct sink_redis *s, const struct node *n)
{
	if (!n->c)
		return false;
	if (n->r_wants_write)
		return true;
	if (n->info_due && !n->w_wants_read && n->wsent == n->wbuf.len)
		return true;
	if (n->w_wants_read)
		return false; /* POLLIN wakes the blocked TLS write */
	if (sink_native_due(n))
		return true;
	if (sink_native_blocks(n)) /* nothing to stage until its replies come */
		return n->wsent < n->wbuf.len;
	if (sink_linger_gate(s)) /* the calls wait for the window's end (node_write) */
		return n->part_seq || n->wsent < n->wbuf.len;
	return n->sendq.len > 0 || n->part_seq || n->wsent < n->wbuf.len;
}

bool sink_redis_want_write(const struct sink_redis *s)
{
	for (int i = 0; i < s->nnodes; i++)
		if (node_wants_write(s, &s->nodes[i]))
			return true;
	return false;
}

int sink_redis_pollfds(struct sink_redis *s, struct pollfd *pfd, int max)
{
	s->npoll = 0;
	for (int i = 0; i < s->nnodes && s->npoll < max; i++) {
		struct node *n = &s->nodes[i];

		if (!n->c)
			continue;
		pfd[s->npoll] = (struct pollfd){
		    .fd = n->c->fd,
		    .events = (short)(POLLIN | (node_wants_write(s, n) ? POLLOUT : 0)),
		};
		s->poll_node[s->npoll++] = i;
	}
	return s->npoll;
}

static bool stage(struct sink_redis *s, struct node *n)
{
	buf_reset(&n->wbuf);
	n->wsent = 0;
	if (sink_native_on(s)) {
		if (!sink_native_stage(s, n, WBUF_FILL))
			return false;
	} else if (!sq_stage(&s->q, &n->sendq, &n->waitq, &n->wbuf, WBUF_FILL, &n->part_seq,
	                     &n->part_off, &n->staged_publish)) {
		return false;
	}
	if (n->part_seq)
		return !n->wbuf.failed; /* WAIT and INFO (connection probes) only between commands */
	if (s->wait_mode && n->staged_publish) {
		buf_append(&n->wbuf, s->wait_cmd.data, s->wait_cmd.len);
		if (!ring_push_u64(&n->waitq, SQ_WAIT_MARK))
			return false;
		n->staged_publish = false;
	}
	if (n->info_due) {
		static const char info[] = "*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n";

		buf_append(&n->wbuf, info, sizeof(info) - 1);
		if (!ring_push_u64(&n->waitq, SQ_INFO_MARK))
			return false;
		n->info_due = false;
		n->info_sent = true;
	}
	return !n->wbuf.failed;
}

static bool node_write(struct sink_redis *s, struct node *n)
{
	const struct redis_conn rc = sink_node_conn(n);

	for (;;) {
		ssize_t w;

		if (n->wsent == n->wbuf.len) {
			bool was_idle = n->waitq.len == 0;

			if (n->sendq.len == 0 && !n->info_due && !n->part_seq && !sink_native_due(n))
				return true;
			/* --linger: new calls wait for the window's end (sink_linger_gate) */
			if (!n->info_due && !n->part_seq && !sink_native_due(n) && sink_linger_gate(s))
				return true;
			if (!stage(s, n)) {
				snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
				return false;
			}
			if (was_idle)
				n->wait_since_us = time_mono_us();
			if (n->wbuf.len == 0)
				return true;
		}
		w = n->io->write(&rc, n->wbuf.data + n->wsent, n->wbuf.len - n->wsent, &n->w_wants_read,
		                 s->errmsg, sizeof(s->errmsg));
		if (w > 0) {
			n->wsent += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			n->wblocked = true; /* poll() says when there is room again */
			return true;
		}
		return false; /* errmsg says why */
	}
}

static bool node_read(struct sink_redis *s, struct node *n)
{
	const struct redis_conn rc = sink_node_conn(n);

	for (;;) {
		char rbuf[65536];
		ssize_t got;
		void *reply;

		got = n->io->read(&rc, rbuf, sizeof(rbuf), &n->r_wants_write, s->errmsg, sizeof(s->errmsg));

		if (got == 0) {
			snprintf(s->errmsg, sizeof(s->errmsg), "connection closed by Redis");
			return false;
		}
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return true;
			return false; /* errmsg says why */
		}
		if (redisReaderFeed(n->c->reader, rbuf, (size_t)got) != REDIS_OK) {
			snprintf(s->errmsg, sizeof(s->errmsg), "Redis protocol error: %s",
			         n->c->reader->errstr);
			return false;
		}
		for (;;) {
			bool ok;

			if (redisReaderGetReply(n->c->reader, &reply) != REDIS_OK) {
				snprintf(s->errmsg, sizeof(s->errmsg), "Redis protocol error: %s",
				         n->c->reader->errstr);
				return false;
			}
			if (!reply)
				break;
			ok = sink_handle_reply(s, n, reply);
			freeReplyObject(reply);
			if (!ok)
				return false;
		}
		sq_advance(&s->q);
		if (!sink_send_grown_batch(s)) {
			snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
			return false;
		}
		/* TLS hands out one record per read: read on until it would block. */
		if (n->io->short_read_drains && (size_t)got < sizeof(rbuf))
			return true;
	}
}

bool sink_redis_io(struct sink_redis *s, const struct pollfd *pfd, int npfd)
{
	if (!s->connected) {
		snprintf(s->errmsg, sizeof(s->errmsg), "not connected");
		return false;
	}
	s->errkind = SINK_ERR_IO; /* unless a reply says otherwise */
	if (!sink_linger_close(s)) {
		snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
		return false;
	}
	for (int i = 0; pfd && i < npfd && i < s->npoll; i++) {
		struct node *n = &s->nodes[s->poll_node[i]];

		short ev = pfd[i].revents;

		if (n->c && (ev & POLLOUT) && !n->w_wants_read)
			n->wblocked = false;
		if (n->c && n->w_wants_read && (ev & (POLLIN | POLLERR | POLLHUP))) {
			n->w_wants_read = false;
			n->wblocked = false;
		}
		if (n->c && ((ev & (POLLIN | POLLERR | POLLHUP)) || (n->r_wants_write && (ev & POLLOUT))) &&
		    !node_read(s, n))
			return false;
	}
	for (int i = 0; i < s->nnodes; i++)
		if (s->nodes[i].c && !s->nodes[i].wblocked && !node_write(s, &s->nodes[i]))
			return false;
	sq_advance(&s->q);
	return true;
}

bool sink_redis_check_stall(struct sink_redis *s, int64_t now_us)
{
	int64_t limit = (int64_t)s->cf->redis_timeout_ms * 1000;

	if (s->wait_mode)
		limit += (int64_t)s->cf->wait_timeout_ms * 1000; /* WAIT may block that long */
	for (int i = 0; i < s->nnodes; i++) {
		struct node *n = &s->nodes[i];

		if (!n->c || n->waitq.len == 0)
			continue;
		if (now_us - n->wait_since_us > limit) {
			char a[300];

			snprintf(s->errmsg, sizeof(s->errmsg), "no reply from Redis within %d ms (%s)",
			         s->cf->redis_timeout_ms, sink_node_addr(n, a, sizeof(a)));
			s->errkind = SINK_ERR_TIMEOUT;
			return false;
		}
	}
	return true;
}
/* used_memory and maxmemory from an INFO memory reply into n. */
void sink_read_memory(struct node *n, const char *info)
{
	char used[32], max[32];

	redis_info_field(info, "used_memory:", used, sizeof(used));
	redis_info_field(info, "maxmemory:", max, sizeof(max));
	if (!used[0] || !max[0])
		return;
	n->used_memory = strtoull(used, NULL, 10);
	n->maxmemory = strtoull(max, NULL, 10);
	n->mem_known = true;
}

void sink_redis_poll_memory(struct sink_redis *s)
{
	for (int i = 0; i < s->nnodes; i++) {
		struct node *n = &s->nodes[i];

		if (n->c && !n->info_sent)
			n->info_due = true;
	}
}

bool sink_redis_memory(const struct sink_redis *s, uint64_t *used, uint64_t *max)
{
	double best = 0;
	bool found = false;

	/* The node closest to its maxmemory; one without a limit scores -1. */
	for (int i = 0; i < s->nnodes; i++) {
		const struct node *n = &s->nodes[i];
		double score;

		if (!n->c || !n->mem_known)
			continue;
		score = n->maxmemory ? (double)n->used_memory / (double)n->maxmemory : -1.0;
		if (!found || score > best || (score == best && n->used_memory > *used)) {
			*used = n->used_memory;
			*max = n->maxmemory;
			best = score;
			found = true;
		}
	}
	return found;
}
