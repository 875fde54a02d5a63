/*
 * test_slot_record.c - unit tests for lib/slot_record.c: the slot record's
 * key, its value written and read back, what is not a record, the owner,
 * and the refusal rule (which slot is the one the relay streamed, and which
 * --accept-gap accepts a gap); the timeline it keeps, a server's timeline
 * history read, and the rule for a server whose history does not hold what
 * Redis has.
 */
#include "slot_record.h"

#include <string.h>

#include "test.h"

TEST(key)
{
	struct buf b = {0};

	slot_record_key(&b, "outbox-relay", "outbox_relay");
	CHECK(!b.failed && strcmp(b.data, "outbox-relay:slot:outbox_relay") == 0);
	slot_record_key(&b, "p{x}", "s");
	CHECK(strcmp(b.data, "p{x}:slot:s") == 0); /* written again from empty */
	buf_finish(&b);
}

TEST(round_trip)
{
	struct slot_record in = {UINT64_C(0x16B3748), UINT64_C(0x16B3700), 1790000000123456,
	                         "7301234567890123456/shop", 0},
	                   out;
	char v[SLOT_RECORD_MAX];
	size_t n = slot_record_format(&in, v, sizeof(v));

	CHECK(n == strlen(v));
	CHECK(strcmp(v, "00000000016B3748 00000000016B3700 1790000000123456 "
	                "7301234567890123456/shop") == 0);
	CHECK(slot_record_parse(v, n, &out));
	CHECK(out.confirmed == in.confirmed && out.commit_lsn == in.commit_lsn);
	CHECK(out.commit_us == in.commit_us && strcmp(out.owner, in.owner) == 0);
	/* A database name with spaces is the rest of the value. */
	snprintf(in.owner, sizeof(in.owner), "%s", "1/my db");
	n = slot_record_format(&in, v, sizeof(v));
	CHECK(slot_record_parse(v, n, &out) && strcmp(out.owner, "1/my db") == 0);
	/* The length decides, not a NUL: the value is what Redis returned. */
	CHECK(slot_record_parse(v, n - 3, &out) && strcmp(out.owner, "1/my") == 0);
	/* Too small a buffer: 0, never a cut value. */
	CHECK(slot_record_format(&in, v, 20) == 0);
}

static bool parse_str(const char *v, struct slot_record *rec)
{
	return slot_record_parse(v, strlen(v), rec);
}

/* The timeline goes between the commit time and the owner; records without it read as 0. */
TEST(timeline)
{
	struct slot_record in = {.confirmed = 0x20, .commit_lsn = 0x10, .commit_us = 5, .tli = 3}, out;
	char v[SLOT_RECORD_MAX];
	size_t n;

	snprintf(in.owner, sizeof(in.owner), "%s", "7301/shop db");
	n = slot_record_format(&in, v, sizeof(v));
	CHECK(strcmp(v, "0000000000000020 0000000000000010 5 tli=3 7301/shop db") == 0);
	CHECK(slot_record_parse(v, n, &out) && out.tli == 3 && strcmp(out.owner, "7301/shop db") == 0);
	CHECK(out.confirmed == 0x20 && out.commit_lsn == 0x10 && out.commit_us == 5);
	in.tli = 4294967295u;
	n = slot_record_format(&in, v, sizeof(v));
	CHECK(slot_record_parse(v, n, &out) && out.tli == 4294967295u);
	/* Written before the timeline was kept: tli 0, the owner as it was. */
	CHECK(parse_str("0000000000000020 0000000000000010 5 7301/shop", &out));
	CHECK(out.tli == 0 && strcmp(out.owner, "7301/shop") == 0);
	/* A "tli=" that is not one, or a timeline without an owner after it. */
	CHECK(!parse_str("0000000000000020 0000000000000010 5 tli=0 7301/shop", &out));
	CHECK(!parse_str("0000000000000020 0000000000000010 5 tli=x 7301/shop", &out));
	CHECK(!parse_str("0000000000000020 0000000000000010 5 tli=4294967296 7/s", &out));
	CHECK(!parse_str("0000000000000020 0000000000000010 5 tli=3 ", &out));
}

/* TIMELINE_HISTORY's file: "<tli>\t<switch point>\t<reason>" lines, comments and blanks. */
TEST(history_parse)
{
	static const char text[] = "1\t0/3000158\tno recovery target specified\n"
	                           "\n"
	                           "# a comment\n"
	                           "2\t0/5000000\tat restore point \"x\"\n"
	                           "3\t1/A0\tno recovery target specified";
	struct slot_history h = {0};

	CHECK(slot_history_parse(text, sizeof(text) - 1, &h));
	CHECK(h.listed && h.n == 3);
	CHECK(h.past[0].tli == 1 && h.past[0].end == UINT64_C(0x3000158));
	CHECK(h.past[1].tli == 2 && h.past[1].end == UINT64_C(0x5000000));
	CHECK(h.past[2].tli == 3 && h.past[2].end == UINT64_C(0x1000000A0));
	CHECK(!slot_history_parse("x\t0/1\n", 6, &h));
	CHECK(!slot_history_parse("2\tnot-an-lsn\n", 14, &h));
	CHECK(!slot_history_parse("0\t0/1\n", 6, &h));
	CHECK(slot_history_parse("", 0, &h) && h.listed && h.n == 0);
}

/*
 * Diverged when the server's WAL ends before the last commit Redis holds, or
 * the record's timeline ended on this server's history before it, or is not
 * on it, or is newer than the server's.
 */
TEST(history_diverged)
{
	struct slot_record rec = {.confirmed = 0x9000, .commit_lsn = 0x5000, .tli = 1};
	struct slot_history h = {.wal_end = 0x6000, .tli = 1, .listed = true};
	char why[400];

	/* Same timeline, WAL past the commit: holds, whatever the confirmed position. */
	CHECK(slot_history_diverged(&rec, 0, &h, why, sizeof(why)) == NULL && why[0] == '\0');
	/* A commit this process handed to Redis past the WAL end (a copy from before it). */
	CHECK(slot_history_diverged(&rec, 0x7000, &h, why, sizeof(why)) == why);
	CHECK(strstr(why, "has WAL up to 0/6000 only") && strstr(why, "up to 0/7000"));
	h.wal_end = 0x4000; /* the record's own commit past the WAL end */
	CHECK(slot_history_diverged(&rec, 0, &h, why, sizeof(why)) == why);
	/* Promoted: timeline 1 ended at 0/5000 on this server's history, the commit at it: holds. */
	h = (struct slot_history){.wal_end = 0x8000, .tli = 2, .listed = true, .n = 1};
	h.past[0].tli = 1;
	h.past[0].end = 0x5000;
	CHECK(slot_history_diverged(&rec, 0, &h, why, sizeof(why)) == NULL);
	/* Timeline 1 ended before a commit Redis has: the standby was behind. */
	CHECK(slot_history_diverged(&rec, 0x5001, &h, why, sizeof(why)) == why);
	CHECK(strstr(why, "left timeline 1 at 0/5000 for timeline 2") != NULL);
	/* The record's timeline is not on this server's history. */
	rec.tli = 7;
	h.tli = 9;
	CHECK(slot_history_diverged(&rec, 0, &h, why, sizeof(why)) == why);
	CHECK(strstr(why, "does not hold timeline 7") != NULL);
	/* A server on an older timeline than the record's: an old primary back. */
	h.tli = 5;
	CHECK(slot_history_diverged(&rec, 0, &h, why, sizeof(why)) == why);
	CHECK(strstr(why, "older than timeline 7") != NULL);
	/* No history read: judged by the WAL end alone. */
	h = (struct slot_history){.wal_end = 0x8000, .tli = 9};
	CHECK(slot_history_diverged(&rec, 0, &h, why, sizeof(why)) == NULL);
	/* A record from before timelines were kept: the WAL end alone. */
	rec.tli = 0;
	h.listed = true;
	CHECK(slot_history_diverged(&rec, 0, &h, why, sizeof(why)) == NULL);
	CHECK(slot_history_diverged(&rec, 0x8001, &h, why, sizeof(why)) == why);
}

TEST(not_a_record)
{
	static const char *bad[] = {
	    "",
	    "hello",
	    "00000000016B3748 00000000016B3700 123", /* no owner */
	    "00000000016B3748 00000000016B3700 123 ",
	    "00000000016B3748 zz 123 1/db",
	    "00000000016B3748",
	};
	struct slot_record r;
	char big[400], nul[] = "0000000000000001 0000000000000001 1 1/d\0b";

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(!slot_record_parse(bad[i], strlen(bad[i]), &r));
		CHECK(r.confirmed == 0 && r.owner[0] == '\0');
	}
	memset(big, 'a', sizeof(big));
	memcpy(big, "0000000000000001 0000000000000001 1 ", 36);
	CHECK(!slot_record_parse(big, sizeof(big), &r));     /* longer than any record */
	CHECK(!slot_record_parse(nul, sizeof(nul) - 1, &r)); /* a NUL inside */
	CHECK(slot_record_parse(nul, strlen(nul), &r) && strcmp(r.owner, "1/d") == 0);
}

TEST(owner)
{
	struct slot_record r = {.owner = "7301/shop"};

	CHECK(slot_record_owner_is(&r, "7301", "shop"));
	CHECK(!slot_record_owner_is(&r, "7302", "shop"));
	CHECK(!slot_record_owner_is(&r, "7301", "sho"));
	CHECK(!slot_record_owner_is(&r, "730", "1/shop"));
	CHECK(!slot_record_owner_is(&r, "73", "shop"));
}

TEST(judge)
{
	struct slot_record rec = {.confirmed = 1000};
	struct slot_seen same = {.exists = true, .confirmed = 1000};
	struct slot_seen behind = {.exists = true, .confirmed = 900};
	struct slot_seen past = {.exists = true, .confirmed = 1001};
	struct slot_seen gone = {.exists = false, .confirmed = 5000};
	struct slot_seen made = {.exists = false, .created_here = true};
	struct slot_seen lost = {
	    .exists = true, .invalidated = true, .invalid_why = "wal_status lost", .confirmed = 1000};
	char why[300];

	CHECK(slot_record_judge(&rec, &same) == SLOT_SAME);
	CHECK(slot_record_judge(&rec, &behind) == SLOT_SAME); /* replays: the watermark drops them */
	CHECK(slot_record_judge(&rec, &past) == SLOT_PAST);
	CHECK(slot_record_judge(&rec, &gone) == SLOT_MISSING);
	CHECK(slot_record_judge(&rec, &made) == SLOT_MISSING);
	CHECK(slot_record_judge(&rec, &lost) == SLOT_INVALIDATED);
	CHECK(strcmp(slot_record_why(SLOT_SAME, &rec, &same, why, sizeof(why)), "") == 0);
	CHECK(strcmp(slot_record_why(SLOT_MISSING, &rec, &gone, why, sizeof(why)), "does not exist") ==
	      0);
	CHECK(strstr(slot_record_why(SLOT_MISSING, &rec, &made, why, sizeof(why)),
	             "this relay created it") != NULL);
	CHECK(strcmp(slot_record_why(SLOT_INVALIDATED, &rec, &lost, why, sizeof(why)),
	             "was invalidated (wal_status lost)") == 0);
	CHECK(strncmp(slot_record_why(SLOT_PAST, &rec, &past, why, sizeof(why)),
	              "stands at 0/3E9, past 0/3E8, the last position this relay confirmed", 66) == 0);
}

TEST(accepts)
{
	struct slot_record rec = {.confirmed = 1000};

	CHECK(slot_record_accepts(&rec, 1000));
	CHECK(!slot_record_accepts(&rec, 999));
	CHECK(!slot_record_accepts(&rec, 1001)); /* a later gap is refused again */
	CHECK(!slot_record_accepts(&rec, LSN_INVALID));
	rec.confirmed = LSN_INVALID;
	CHECK(!slot_record_accepts(&rec, LSN_INVALID)); /* no --accept-gap accepts nothing */
}

/* A heal starts HEAL_MARGIN_S before the last commit: created_at is a transaction's start. */
TEST(heal_since)
{
	struct slot_record rec = {.commit_us = INT64_C(1790000000123456)}; /* 2026-09-21T14:13:20Z */
	char buf[64];

	CHECK(HEAL_MARGIN_S == 300);
	CHECK(slot_record_heal_since(&rec, buf, sizeof(buf)) == buf);
	CHECK(strncmp(buf, "2026-09-21T14:08:20.123456", 26) == 0);
	rec.commit_us = 0; /* no commit recorded: no time to start from */
	CHECK(slot_record_heal_since(&rec, buf, sizeof(buf)) == NULL);
}

int main(void)
{
	RUN(key);
	RUN(round_trip);
	RUN(timeline);
	RUN(history_parse);
	RUN(history_diverged);
	RUN(not_a_record);
	RUN(owner);
	RUN(judge);
	RUN(accepts);
	RUN(heal_since);
	return test_done();
}
