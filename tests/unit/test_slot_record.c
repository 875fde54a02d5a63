/*
 * test_slot_record.c - unit tests for lib/slot_record.c: the slot record's
 * key, its value written and read back, what is not a record, the owner,
 * and the refusal rule (which slot is the one the relay streamed, and which
 * --accept-gap accepts a gap).
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
	                         "7301234567890123456/shop"},
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
	RUN(not_a_record);
	RUN(owner);
	RUN(judge);
	RUN(accepts);
	RUN(heal_since);
	return test_done();
}
