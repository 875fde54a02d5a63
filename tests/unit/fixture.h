/*
 * fixture.h - the lines of a file under tests/fixtures/FIXTURE_SUBDIR/ (each
 * test defines FIXTURE_SUBDIR, and meson FIXTURES_DIR, before including it).
 */
#ifndef RELAY_TEST_FIXTURE_H
#define RELAY_TEST_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MAX_LINES
#define MAX_LINES 256
#endif

/* Lines of one fixture file, trailing newline stripped; owned by the caller. */
struct lines {
	char *text;
	char *line[MAX_LINES];
	size_t len[MAX_LINES];
	size_t n;
};

/* Read tests/fixtures/FIXTURE_SUBDIR/<name> into *ls; false when unreadable. */
static inline bool read_fixture(const char *name, struct lines *ls)
{
	char path[1024];
	FILE *f;
	long size;
	char *p, *end;

	memset(ls, 0, sizeof(*ls));
	snprintf(path, sizeof(path), "%s/%s/%s", FIXTURES_DIR, FIXTURE_SUBDIR, name);
	f = fopen(path, "rb");
	if (!f) {
		printf("# cannot open %s\n", path);
		return false;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return false;
	}
	ls->text = malloc((size_t)size + 1);
	if (!ls->text || fread(ls->text, 1, (size_t)size, f) != (size_t)size) {
		fclose(f);
		free(ls->text);
		ls->text = NULL;
		return false;
	}
	fclose(f);
	ls->text[size] = '\0';
	p = ls->text;
	end = ls->text + size;
	while (p < end && ls->n < MAX_LINES) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (l > 0) {
			ls->line[ls->n] = p;
			ls->len[ls->n] = l;
			ls->n++;
		}
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
	return true;
}

static inline void free_fixture(struct lines *ls)
{
	free(ls->text);
	ls->text = NULL;
}

#endif
