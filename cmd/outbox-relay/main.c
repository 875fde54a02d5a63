/*
 * outbox-relay - publish transactional outbox rows from a PostgreSQL logical
 * replication slot (wal2json) to Redis Streams, exactly once per event id.
 *
 * This file only parses the configuration and hands over to relay_run(), to
 * status_main() for `outbox-relay status`, or to the main of one of the
 * commands that take the relay's options and the Republish section's
 * (republish, heal, verify).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "exitcode.h"
#include "heal.h"
#include "log.h"
#include "relay.h"
#include "republish.h"
#include "status.h"
#include "verify.h"

extern char **environ;

/* The commands that take the relay's options (config_load_as). */
static const struct command {
	const char *name;
	void (*usage)(FILE *out);
	int (*main)(const struct relay_config *cf);
} commands[] = {
    {"republish", republish_usage, republish_main},
    {"heal", heal_usage, heal_main},
    {"verify", verify_usage, verify_main},
};

/* Parse the options (of cmd, or the relay's when cmd is NULL) into cf; -1 to go on, else the exit
 * code. */
static int load(struct relay_config *cf, const struct command *cmd, int argc, char **argv)
{
	char err[1024], who[64];

	snprintf(who, sizeof(who), "outbox-relay%s%s", cmd ? " " : "", cmd ? cmd->name : "");
	switch (cmd ? config_load_as(cf, CONFIG_CMD_REPUBLISH, who, cmd->usage, argc, argv, environ,
	                             err, sizeof(err))
	            : config_load(cf, argc, argv, environ, err, sizeof(err))) {
	case CONFIG_OK:
		break;
	case CONFIG_HELP:
	case CONFIG_VERSION:
		return EXIT_OK;
	case CONFIG_ERROR:
	default:
		fprintf(stderr, "%s: %s\n", who, err);
		return EXIT_USAGE;
	}
	log_setup(cf->log_level, cf->log_format);
	for (size_t i = 0; i < cf->nwarnings; i++)
		log_warn("%s", cf->warnings[i]);
	return -1;
}

int main(int argc, char **argv)
{
	struct relay_config cf;
	int rc;

	if (argc > 1 && strcmp(argv[1], "status") == 0)
		return status_main(argc - 1, argv + 1, environ);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (argc > 1 && strcmp(argv[1], commands[i].name) == 0) {
			rc = load(&cf, &commands[i], argc - 1, argv + 1);
			if (rc < 0)
				rc = commands[i].main(&cf);
			config_finish(&cf);
			return rc;
		}
	}
	rc = load(&cf, NULL, argc, argv);
	if (rc >= 0) {
		config_finish(&cf);
		return rc;
	}
	if (cf.since || cf.until) {
		fprintf(stderr, "outbox-relay: --since and --until are options of outbox-relay "
		                "republish; drop them (or OUTBOX_RELAY_SINCE/_UNTIL) to run the relay\n");
		rc = EXIT_USAGE;
	} else if (cf.check_config || cf.check_config_offline) {
		rc = relay_check_config(&cf, stdout);
	} else {
		rc = relay_run(&cf);
	}
	config_finish(&cf);
	return rc;
}
