/*
 * slot_record.c - the slot record's key, value and refusal rule (see
 * slot_record.h). Pure: unit-tested in tests/unit/test_slot_record.c.
 */
#include "slot_record.h"

#include <stdio.h>
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
	int n = snprintf(out, len, "%016llX %016llX %lld %s", (unsigned long long)rec->confirmed,
	                 (unsigned long long)rec->commit_lsn, (long long)rec->commit_us, rec->owner);

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
