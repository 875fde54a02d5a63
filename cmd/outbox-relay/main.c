/*
 * outbox-relay - publish transactional outbox rows from a PostgreSQL logical
 * replication slot (wal2json) to Redis Streams, exactly once per event id.
 *
 * This file only parses the configuration and hands over to relay_run(), to
 * status_main() for `outbox-relay status`, to republish_main() for
 * `outbox-relay republish`, or to heal_main() for `outbox-relay heal`.
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

int main(int argc, char **argv)
{
	struct relay_config cf;
	char err[1024];
	bool republish = argc > 1 && strcmp(argv[1], "republish") == 0;
	int rc;

	if (argc > 1 && strcmp(argv[1], "status") == 0)
		return status_main(argc - 1, argv + 1, environ);
	if (argc > 1 && strcmp(argv[1], "verify") == 0) {
		switch (config_load_as(&cf, CONFIG_CMD_REPUBLISH, "outbox-relay verify", verify_usage,
		                       argc - 1, argv + 1, environ, err, sizeof(err))) {
		case CONFIG_OK:
			log_setup(cf.log_level, cf.log_format);
			rc = verify_main(&cf);
			break;
		case CONFIG_HELP:
		case CONFIG_VERSION:
			rc = EXIT_OK;
			break;
		default:
			fprintf(stderr, "outbox-relay verify: %s\n", err);
			rc = EXIT_USAGE;
		}
		config_finish(&cf);
		return rc;
	}
	if (argc > 1 && strcmp(argv[1], "heal") == 0) {
		switch (config_load_as(&cf, CONFIG_CMD_REPUBLISH, "outbox-relay heal", heal_usage, argc - 1,
		                       argv + 1, environ, err, sizeof(err))) {
		case CONFIG_OK:
			log_setup(cf.log_level, cf.log_format);
			for (size_t i = 0; i < cf.nwarnings; i++)
				log_warn("%s", cf.warnings[i]);
			rc = heal_main(&cf);
			break;
		case CONFIG_HELP:
		case CONFIG_VERSION:
			rc = EXIT_OK;
			break;
		default:
			fprintf(stderr, "outbox-relay heal: %s\n", err);
			rc = EXIT_USAGE;
		}
		config_finish(&cf);
		return rc;
	}
	if (republish) {
		argc--;
		argv++;
	}
	switch (republish ? config_load_as(&cf, CONFIG_CMD_REPUBLISH, "outbox-relay republish",
	                                   republish_usage, argc, argv, environ, err, sizeof(err))
	                  : config_load(&cf, argc, argv, environ, err, sizeof(err))) {
	case CONFIG_OK:
		break;
	case CONFIG_HELP:
	case CONFIG_VERSION:
		config_finish(&cf);
		return EXIT_OK;
	case CONFIG_ERROR:
	default:
		fprintf(stderr, "outbox-relay%s: %s\n", republish ? " republish" : "", err);
		config_finish(&cf);
		return EXIT_USAGE;
	}
	log_setup(cf.log_level, cf.log_format);
	for (size_t i = 0; i < cf.nwarnings; i++)
		log_warn("%s", cf.warnings[i]);
	if (republish) {
		rc = republish_main(&cf);
		config_finish(&cf);
		return rc;
	}
	if (cf.since || cf.until) {
		fprintf(stderr, "outbox-relay: --since and --until are options of outbox-relay "
		                "republish; drop them (or OUTBOX_RELAY_SINCE/_UNTIL) to run the relay\n");
		config_finish(&cf);
		return EXIT_USAGE;
	}
	if (cf.check_config || cf.check_config_offline) {
		rc = relay_check_config(&cf, stdout);
		config_finish(&cf);
		return rc;
	}
	rc = relay_run(&cf);
	config_finish(&cf);
	return rc;
}
