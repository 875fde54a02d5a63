/*
 * slot_record.c - the slot record's key, value and refusal rule (see
 * slot_record.h). Pure: unit-tested in tests/unit/test_slot_record.c.
 */
#include "slot_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void slot_record_key(struct buf *b, const char *key_prefix, const char *slot)
{
	buf_reset(b);
	buf_puts(b, key_prefix);
	buf_puts(b, ":slot:");
	buf_puts(b, slot);
}

size_t slot_record_format(const struct slot_record *rec, char *out, size_t len)
{
	char tli[24] = "";
	int n;

	if (rec->tli)
		(void)snprintf(tli, sizeof(tli), "tli=%u ", (unsigned)rec->tli);
	n = snprintf(out, len, "%016llX %016llX %lld %s%s", (unsigned long long)rec->confirmed,
	             (unsigned long long)rec->commit_lsn, (long long)rec->commit_us, tli, rec->owner);

	return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

bool slot_record_parse(const char *v, size_t len, struct slot_record *rec)
{
	unsigned long long conf, commit;
	long long us;
	int used = 0;
	char text[SLOT_RECORD_MAX];

	memset(rec, 0, sizeof(*rec));
	if (len >= sizeof(text) || memchr(v, '\0', len))
		return false;
	memcpy(text, v, len);
	text[len] = '\0';
	if (sscanf(text, "%16llx %16llx %lld %n", &conf, &commit, &us, &used) != 3 || used == 0 ||
	    (size_t)used >= len || strlen(text + used) >= sizeof(rec->owner))
		return false;
	if (strncmp(text + used, "tli=", 4) == 0) {
		unsigned long tli;
		int more = 0;

		if (sscanf(text + used, "tli=%lu %n", &tli, &more) != 1 || more == 0 || tli == 0 ||
		    tli > UINT32_MAX || (size_t)(used + more) >= len)
			return false;
		rec->tli = (uint32_t)tli;
		used += more;
		if (strlen(text + used) >= sizeof(rec->owner))
			return false;
	}
	rec->confirmed = (lsn_t)conf;
	rec->commit_lsn = (lsn_t)commit;
	rec->commit_us = us;
	memcpy(rec->owner, text + used, strlen(text + used) + 1);
	return true;
}

bool slot_record_owner_is(const struct slot_record *rec, const char *system_id, const char *dbname)
{
	size_t n = strlen(system_id);

	return strncmp(rec->owner, system_id, n) == 0 && rec->owner[n] == '/' &&
	       strcmp(rec->owner + n + 1, dbname) == 0;
}

enum slot_verdict slot_record_judge(const struct slot_record *rec, const struct slot_seen *seen)
{
	if (!seen->exists)
		return SLOT_MISSING;
	if (seen->invalidated)
		return SLOT_INVALIDATED;
	if (seen->confirmed > rec->confirmed)
		return SLOT_PAST;
	return SLOT_SAME;
}

const char *slot_record_why(enum slot_verdict v, const struct slot_record *rec,
                            const struct slot_seen *seen, char *why, size_t len)
{
	char a[LSN_STRLEN], b[LSN_STRLEN];

	if (len == 0)
		return why;
	why[0] = '\0';
	switch (v) {
	case SLOT_SAME:
		break;
	case SLOT_MISSING:
		snprintf(why, len, "does not exist%s",
		         seen->created_here ? " (this relay created it while Redis was unreachable)" : "");
		break;
	case SLOT_INVALIDATED:
		snprintf(why, len, "was invalidated (%s)", seen->invalid_why ? seen->invalid_why : "");
		break;
	case SLOT_PAST:
		snprintf(why, len,
		         "stands at %s, past %s, the last position this relay confirmed: it was "
		         "created again or advanced by something else, or Redis lost the newer "
		         "record (a failover without --wait-replicas)",
		         lsn_format(seen->confirmed, a), lsn_format(rec->confirmed, b));
		break;
	}
	return why;
}

const char *slot_record_heal_since(const struct slot_record *rec, char *buf, size_t len)
{
	return rec->commit_us > 0
	           ? time_format_iso(rec->commit_us - (int64_t)HEAL_MARGIN_S * 1000000, buf, len)
	           : NULL;
}

bool slot_record_accepts(const struct slot_record *rec, lsn_t accept)
{
	return accept != LSN_INVALID && accept == rec->confirmed;
}

bool slot_history_parse(const char *text, size_t len, struct slot_history *h)
{
	const char *p = text, *end = text + len;

	h->n = 0;
	h->listed = true;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((eol ? eol : end) - p);
		char line[128], *e;
		unsigned long tli;
		lsn_t at;
		size_t sp;

		if (n == 0 || p[0] == '#') {
			p += n + 1;
			continue;
		}
		if (n >= sizeof(line))
			n = sizeof(line) - 1; /* the reason may be long; the first two fields are not */
		memcpy(line, p, n);
		line[n] = '\0';
		p = eol ? eol + 1 : end;
		tli = strtoul(line, &e, 10);
		if (e == line || (*e != '\t' && *e != ' ') || tli == 0 || tli > UINT32_MAX)
			return false;
		e += strspn(e, "\t ");
		sp = strcspn(e, "\t ");
		if (!lsn_parse(e, sp, &at))
			return false;
		if (h->n == SLOT_HISTORY_MAX) { /* keep the newest */
			memmove(&h->past[0], &h->past[1], sizeof(h->past[0]) * (SLOT_HISTORY_MAX - 1));
			h->n--;
		}
		h->past[h->n].tli = (uint32_t)tli;
		h->past[h->n].end = at;
		h->n++;
	}
	return true;
}

const char *slot_history_diverged(const struct slot_record *rec, lsn_t pos,
                                  const struct slot_history *h, char *why, size_t len)
{
	char a[LSN_STRLEN], b[LSN_STRLEN];

	if (len)
		why[0] = '\0';
	if (rec->commit_lsn > pos)
		pos = rec->commit_lsn;
	if (h->wal_end && h->wal_end < pos) {
		snprintf(why, len,
		         "has WAL up to %s only, and this relay already put in Redis what was committed "
		         "up to %s (timeline %u, now %u): this server does not have those "
		         "transactions (a standby that was behind, promoted, or a copy restored)",
		         lsn_format(h->wal_end, a), lsn_format(pos, b), (unsigned)rec->tli,
		         (unsigned)h->tli);
		return why;
	}
	if (!rec->tli || !h->tli || rec->tli == h->tli)
		return NULL;
	if (h->tli < rec->tli) {
		snprintf(why, len,
		         "is on timeline %u, older than timeline %u on which this relay put what was "
		         "committed up to %s in Redis (an old primary back in service?)",
		         (unsigned)h->tli, (unsigned)rec->tli, lsn_format(pos, b));
		return why;
	}
	if (!h->listed)
		return NULL; /* the history could not be read: judged by the WAL end alone */
	for (size_t i = 0; i < h->n; i++) {
		if (h->past[i].tli != rec->tli)
			continue;
		if (pos <= h->past[i].end)
			return NULL;
		snprintf(why, len,
		         "left timeline %u at %s for timeline %u, but this relay put in Redis what "
		         "was committed on timeline %u up to %s: this server does not have the "
		         "transactions after %s (a standby that was behind, promoted)",
		         (unsigned)rec->tli, lsn_format(h->past[i].end, a), (unsigned)h->tli,
		         (unsigned)rec->tli, lsn_format(pos, b), a);
		return why;
	}
	snprintf(why, len,
	         "is on timeline %u, whose history does not hold timeline %u, on which this relay put "
	         "what was committed up to %s in Redis",
	         (unsigned)h->tli, (unsigned)rec->tli, lsn_format(pos, b));
	return why;
}
