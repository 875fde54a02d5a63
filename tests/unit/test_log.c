/*
 * test_log.c - unit tests for lib/log.c: one record is one line. Control
 * bytes in the message or a key=value pair (data-derived strings such as an
 * event id in a dead-letter reason) are escaped in text and JSON, so they
 * cannot end the line and forge another record.
 */
#include "log.h"

#include <stdio.h>
#include <unistd.h>

#include "test.h"

static char out[16384];

/* Run one log call with stderr sent to a temporary file; its output in out. */
#define CAPTURE(call)                                                                              \
	do {                                                                                           \
		FILE *f_ = tmpfile();                                                                      \
		int saved_ = dup(STDERR_FILENO);                                                           \
		size_t n_;                                                                                 \
		fflush(stderr);                                                                            \
		dup2(fileno(f_), STDERR_FILENO);                                                           \
		call;                                                                                      \
		dup2(saved_, STDERR_FILENO);                                                               \
		close(saved_);                                                                             \
		rewind(f_);                                                                                \
		n_ = fread(out, 1, sizeof(out) - 1, f_);                                                   \
		out[n_] = '\0';                                                                            \
		fclose(f_);                                                                                \
	} while (0)

static int count_char(const char *s, char c)
{
	int n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}

#define FORGED "x\nFAKE error: relay compromised\r\x1b[2J\x7f"

TEST(text_escapes_message)
{
	log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	CAPTURE(log_warn("dead-lettering: event id \"%s\" is not a uuid", FORGED));
	CHECK_INT(count_char(out, '\n'), 1);
	CHECK(!strchr(out, '\r'));
	CHECK(!strchr(out, '\x1b'));
	CHECK(!strchr(out, '\x7f'));
	CHECK(strstr(out, " warn: dead-lettering: event id \"x\\nFAKE error: relay "
	                  "compromised\\r\\x1b[2J\\x7f\" is not a uuid\n") != NULL);
}

TEST(text_escapes_pairs)
{
	struct log_kv kv[] = {{"stream", "s\nFAKE error: x"}};

	log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	CAPTURE(log_write_kv(LOG_LEVEL_INFO, kv, 1, "hello"));
	CHECK_INT(count_char(out, '\n'), 1);
	CHECK(strstr(out, " info: hello stream=s\\nFAKE error: x\n") != NULL);
}

TEST(text_plain_unchanged)
{
	log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
	CAPTURE(log_info("connected to PostgreSQL at \"C:\\dir\" \ttab"));
	CHECK(strstr(out, " info: connected to PostgreSQL at \"C:\\dir\" \\ttab\n") != NULL);
}

TEST(json_escapes)
{
	log_setup(LOG_LEVEL_INFO, LOG_FORMAT_JSON);
	CAPTURE(log_warn("id \"%s\"", FORGED));
	CHECK_INT(count_char(out, '\n'), 1);
	CHECK(!strchr(out, '\r'));
	CHECK(strstr(out, "\"msg\":\"id \\\"x\\u000aFAKE error: relay compromised\\u000d\\u001b[2J") !=
	      NULL);
	log_setup(LOG_LEVEL_INFO, LOG_FORMAT_TEXT);
}

int main(void)
{
	RUN(text_escapes_message);
	RUN(text_escapes_pairs);
	RUN(text_plain_unchanged);
	RUN(json_escapes);
	return test_done();
}
