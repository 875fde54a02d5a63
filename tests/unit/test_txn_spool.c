/*
 * test_txn_spool.c - unit tests for lib/txn_spool.c: messages come back in
 * the order they went in, byte for byte, with their LSNs, whether they were
 * held in memory, in the file, or across both; clear and reuse; a directory
 * that cannot take the file is a failure with its name, not a lost message.
 */
#include "txn_spool.h"
#include "pgoutput.h"
#include "test.h"

#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/* Message i: i bytes (plus i * 37 for every seventh), each byte a function of i and its offset. */
static size_t msg_len(size_t i)
{
	return i % 7 == 0 ? i * 37 : i;
}

static void msg_fill(char *p, size_t i)
{
	for (size_t k = 0; k < msg_len(i); k++)
		p[k] = (char)(i * 31 + k * 7 + (k >> 8));
}

/* Add n messages, read them back twice (rewind), compare each. */
static bool roundtrip(struct txn_spool *s, size_t n)
{
	char *want = malloc(n * 37 + 1);
	bool ok = want != NULL;

	for (size_t i = 0; ok && i < n; i++) {
		msg_fill(want, i);
		ok = txn_spool_add(s, want, msg_len(i), (lsn_t)(0x1000 + i));
	}
	CHECK_INT(txn_spool_count(s), n);
	for (int pass = 0; ok && pass < 2; pass++) {
		size_t i = 0;
		const char *data;
		size_t len;
		lsn_t lsn;
		int r;

		while ((r = txn_spool_next(s, &data, &len, &lsn)) == 1) {
			msg_fill(want, i);
			if (len != msg_len(i) || lsn != (lsn_t)(0x1000 + i) ||
			    (len && memcmp(data, want, len) != 0)) {
				printf("# message %zu differs (len %zu, want %zu)\n", i, len, msg_len(i));
				ok = false;
				break;
			}
			i++;
		}
		ok = ok && r == 0 && i == n;
		ok = ok && txn_spool_rewind(s);
	}
	free(want);
	return ok;
}

TEST(memory_only)
{
	struct txn_spool *s = txn_spool_create(1 << 20, NULL);

	CHECK(s != NULL);
	CHECK(roundtrip(s, 50));
	CHECK_INT(txn_spool_spilled(s), 0);
	txn_spool_destroy(s);
}

TEST(spills_in_order)
{
	/* 1000 bytes of memory: the first messages stay there, the rest go to the file. */
	struct txn_spool *s = txn_spool_create(1000, NULL);

	CHECK(s != NULL);
	CHECK(roundtrip(s, 300));
	CHECK(txn_spool_spilled(s) > 0);
	CHECK(txn_spool_bytes(s) > txn_spool_spilled(s));
	txn_spool_destroy(s);
}

TEST(file_only)
{
	struct txn_spool *s = txn_spool_create(0, NULL);

	CHECK(s != NULL);
	CHECK(roundtrip(s, 120));
	CHECK_INT(txn_spool_spilled(s), txn_spool_bytes(s));
	txn_spool_destroy(s);
}

/*
 * A large message read back from the file (PGO_BY_REFERENCE bytes or more: it may hold a value a
 * sink keeps by pointer) lies in an allocation of its own, which can be taken (and freed by the
 * taker) while the spool reads on; one held in memory, or a small one read from the file's blocks,
 * cannot be taken.
 */
#define BIG (PGO_BY_REFERENCE + 4000)
TEST(take_buffer_of_file_records)
{
	struct txn_spool *s = txn_spool_create(100, NULL);
	const char *data;
	size_t len;
	lsn_t lsn;
	char a[40], small[5000];
	char *big = malloc(BIG);

	CHECK(s != NULL && big != NULL);
	memset(a, 'a', sizeof(a));
	memset(small, 's', sizeof(small));
	memset(big, 'b', BIG);
	CHECK(txn_spool_add(s, a, sizeof(a), 1));         /* in memory */
	CHECK(txn_spool_add(s, big, BIG, 2));             /* past the cap: the file, on its own */
	CHECK(txn_spool_add(s, big, BIG - 1000, 3));      /* on its own too */
	CHECK(txn_spool_add(s, small, sizeof(small), 4)); /* the file's blocks */
	CHECK(txn_spool_next(s, &data, &len, &lsn) == 1 && lsn == 1);
	CHECK(txn_spool_buffer(s) == NULL && txn_spool_take_buffer(s) == NULL);
	CHECK(txn_spool_next(s, &data, &len, &lsn) == 1 && lsn == 2 && len == BIG);
	CHECK(txn_spool_buffer(s) == data);
	{
		char *mine = txn_spool_take_buffer(s);

		CHECK(mine == data && txn_spool_buffer(s) == NULL);
		/* The next read goes to a new allocation: the taken one keeps its bytes. */
		CHECK(txn_spool_next(s, &data, &len, &lsn) == 1 && lsn == 3 && len == BIG - 1000);
		CHECK(data != mine && txn_spool_buffer(s) == data);
		CHECK(mine && memcmp(mine, big, BIG) == 0);
		free(mine);
	}
	CHECK(memcmp(data, big, BIG - 1000) == 0);
	CHECK(txn_spool_next(s, &data, &len, &lsn) == 1 && lsn == 4 && len == sizeof(small));
	CHECK(memcmp(data, small, sizeof(small)) == 0);
	CHECK(txn_spool_buffer(s) == NULL && txn_spool_take_buffer(s) == NULL);
	CHECK(txn_spool_next(s, &data, &len, &lsn) == 0);
	CHECK(txn_spool_buffer(s) == NULL);
	txn_spool_clear(s);
	CHECK(txn_spool_buffer(s) == NULL);
	txn_spool_destroy(s);
	free(big);
}

/*
 * Many messages, small and large, in the file: records cross the blocks' edges, large ones
 * come between small ones, and what is read between adds sees every add before it.
 */
TEST(file_blocks_and_large_records)
{
	struct txn_spool *s = txn_spool_create(0, NULL);
	const char *data;
	size_t len;
	lsn_t lsn;
	char *want = malloc(BIG + 4096);

	CHECK(s != NULL && want != NULL);
	CHECK(roundtrip(s, 3000)); /* 3,000 messages of up to 110 KB, about 23 MB: most in blocks */
	txn_spool_clear(s);
	for (size_t i = 0; i < 200; i++) {
		size_t n = i % 13 == 5 ? BIG + i : i * 61;

		for (size_t k = 0; k < n; k++)
			want[k] = (char)(i + k * 3);
		CHECK(txn_spool_add(s, want, n, (lsn_t)i));
		/* Every fiftieth: read everything so far, then add on. */
		if (i % 50 == 49) {
			size_t got = 0;

			CHECK(txn_spool_rewind(s));
			while (txn_spool_next(s, &data, &len, &lsn) == 1)
				got++;
			CHECK_INT(got, i + 1);
		}
	}
	CHECK(txn_spool_rewind(s));
	for (size_t i = 0; i < 200; i++) {
		size_t n = i % 13 == 5 ? BIG + i : i * 61;
		bool same = true;

		CHECK(txn_spool_next(s, &data, &len, &lsn) == 1);
		CHECK_INT(len, n);
		CHECK_INT(lsn, i);
		for (size_t k = 0; k < n && k < len && same; k++)
			same = data[k] == (char)(i + k * 3);
		CHECK(same);
		CHECK((txn_spool_buffer(s) != NULL) == (n >= PGO_BY_REFERENCE));
	}
	CHECK_INT(txn_spool_next(s, &data, &len, &lsn), 0);
	txn_spool_destroy(s);
	free(want);
}

TEST(clear_and_reuse)
{
	struct txn_spool *s = txn_spool_create(2000, NULL);
	const char *data;
	size_t len;
	lsn_t lsn;

	CHECK(s != NULL);
	for (int round = 0; round < 3; round++) {
		CHECK(roundtrip(s, (size_t)(100 + round * 50)));
		txn_spool_clear(s);
		CHECK_INT(txn_spool_count(s), 0);
		CHECK_INT(txn_spool_bytes(s), 0);
		CHECK_INT(txn_spool_next(s, &data, &len, &lsn), 0);
	}
	/* After a spill, a small transaction is all in memory again. */
	CHECK(roundtrip(s, 10));
	CHECK_INT(txn_spool_spilled(s), 0);
	txn_spool_destroy(s);
}

TEST(empty_messages)
{
	struct txn_spool *s = txn_spool_create(0, NULL);
	const char *data;
	size_t len = 99;
	lsn_t lsn = 0;

	CHECK(s != NULL);
	CHECK(txn_spool_add(s, "", 0, 7));
	CHECK_INT(txn_spool_next(s, &data, &len, &lsn), 1);
	CHECK_INT(len, 0);
	CHECK_INT(lsn, 7);
	CHECK_INT(txn_spool_next(s, &data, &len, &lsn), 0);
	txn_spool_destroy(s);
}

TEST(unwritable_dir_fails_with_its_name)
{
	struct txn_spool *s = txn_spool_create(20, "/nonexistent/spool-dir");
	char big[64] = {0};
	const char *data = NULL;
	size_t len = 0;
	lsn_t lsn;

	CHECK(s != NULL);
	CHECK(txn_spool_add(s, "tiny", 4, 1)); /* fits in memory (4 + 12 <= 20) */
	CHECK(!txn_spool_add(s, big, sizeof(big), 2));
	CHECK(strstr(txn_spool_errmsg(s), "/nonexistent/spool-dir") != NULL);
	/* Failed: nothing is read back as if it were whole. */
	CHECK_INT(txn_spool_next(s, &data, &len, &lsn), -1);
	txn_spool_clear(s);
	CHECK(txn_spool_add(s, "again", 5, 3));
	CHECK_INT(txn_spool_next(s, &data, &len, &lsn), 1);
	CHECK_MEM(data, len, "again");
	txn_spool_destroy(s);
}

int main(void)
{
	RUN(memory_only);
	RUN(spills_in_order);
	RUN(file_only);
	RUN(take_buffer_of_file_records);
	RUN(file_blocks_and_large_records);
	RUN(clear_and_reuse);
	RUN(empty_messages);
	RUN(unwritable_dir_fails_with_its_name);
	return test_done();
}
