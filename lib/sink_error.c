/*
 * sink_error.c - what a Redis error reply means: its kind (the retry rule
 * and the metric label) and the one-line message for an ACL refusal. Pure.
 */
#include "sink_error.h"

#include <stdio.h>
#include <string.h>

/*
 * An ACL refusal: "NOPERM ..." for a command the relay sends, "ERR The user
 * executing the script can't ..." for one the function or script sends.
 */
bool sink_error_noperm(const char *msg)
{
	return strncmp(msg, "NOPERM", 6) == 0 || strstr(msg, "user executing the script can't");
}

/* An ACL refusal of a key (not of a command). */
bool sink_error_key_refusal(const char *msg)
{
	return sink_error_noperm(msg) && strstr(msg, "access") && strstr(msg, "key");
}

/* Classify an error reply by its first word. */
enum sink_error_kind sink_error_classify(const char *msg)
{
	if (sink_error_noperm(msg))
		return SINK_ERR_NOPERM;

	static const struct {
		const char *prefix;
		enum sink_error_kind kind;
	} map[] = {
	    {"OOM", SINK_ERR_OOM},
	    {"WRONGTYPE", SINK_ERR_WRONGTYPE},
	    {"NOSCRIPT", SINK_ERR_NOSCRIPT},
	    {"READONLY", SINK_ERR_READONLY},
	    {"BUSY", SINK_ERR_BUSY},
	    {"LOADING", SINK_ERR_BUSY},
	    {"MASTERDOWN", SINK_ERR_BUSY},
	    {"TRYAGAIN", SINK_ERR_CLUSTER},
	    {"MOVED", SINK_ERR_CLUSTER},
	    {"ASK", SINK_ERR_CLUSTER},
	    {"CLUSTERDOWN", SINK_ERR_CLUSTER},
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strncmp(msg, map[i].prefix, strlen(map[i].prefix)) == 0)
			return map[i].kind;
	if (strstr(msg, "OUTBOX_BEHIND"))
		return SINK_ERR_ORDER;
	if (strstr(msg, "OUTBOX_FOREIGN"))
		return SINK_ERR_FOREIGN;
	if (strstr(msg, "Function not found") || strstr(msg, "NOSCRIPT"))
		return SINK_ERR_NOSCRIPT;
	if (strstr(msg, "WRONGTYPE"))
		return SINK_ERR_WRONGTYPE; /* raised inside the function: "... script: ..." */
	if (strstr(msg, "OOM command not allowed"))
		return SINK_ERR_OOM;
	return SINK_ERR_OTHER;
}

/*
 * One line for an ACL refusal of what: the permission to grant, from the
 * reply's "'wait' command" when it names one, else fix (NULL: say which keys).
 */
void sink_error_noperm_text(char *buf, size_t len, const char *what, const char *fix,
                            const char *msg)
{
	const char *q = strchr(msg, '\'');
	const char *e = q ? strchr(q + 1, '\'') : NULL;
	char perm[64];

	if (strncmp(msg, "NOPERM", 6) != 0 || !strstr(msg, "command"))
		fix = NULL; /* a key, or a command the function sends */
	if (q && e && e > q + 1 && (size_t)(e - q - 1) < sizeof(perm)) {
		snprintf(perm, sizeof(perm), "%.*s", (int)(e - q - 1), q + 1);
		fix = perm;
	}
	if (fix)
		snprintf(buf, len,
		         "%s refused by the Redis ACL (%s): grant +%s to the relay's Redis user "
		         "(see deploy/redis/users.acl)",
		         what, msg, fix);
	else
		snprintf(buf, len,
		         "%s refused by the Redis ACL (%s): grant the relay's Redis user the commands "
		         "and key patterns of deploy/redis/users.acl (~outbox:* ~outbox-relay:*, or "
		         "your --key-prefix and stream names)",
		         what, msg);
}
