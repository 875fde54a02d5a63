/*
 * outbox-consume - the reference Redis Streams consumer for outbox-relay:
 * reads a consumer group (own pending entries first, then new ones, plus
 * entries other consumers left pending too long) and prints one JSON line
 * per event, acknowledging each only after it has been written.
 *
 * This file only parses the configuration and hands over to consumer_run(),
 * or to consumer_poison_main() for `outbox-consume poison list|replay`.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "consumer.h"
#include "exitcode.h"
#include "log.h"

extern char **environ;

int main(int argc, char **argv)
{
	struct consumer_config cf;
	char err[1024];
	int rc;

	if (argc > 1 && strcmp(argv[1], "poison") == 0)
		return consumer_poison_main(argc - 1, argv + 1, environ);
	switch (consumer_config_load(&cf, argc, argv, environ, err, sizeof(err))) {
	case CONFIG_OK:
		break;
	case CONFIG_HELP:
	case CONFIG_VERSION:
		return EXIT_OK;
	case CONFIG_ERROR:
	default:
		fprintf(stderr, "outbox-consume: %s\n", err);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < cf.nwarnings; i++)
		log_warn("%s", cf.warnings[i]);
	rc = consumer_run(&cf);
	consumer_config_finish(&cf);
	return rc;
}
