/*
 * opt.h - the one option engine of outbox-relay, `outbox-relay status`,
 * `outbox-relay republish` and outbox-consume.
 *
 * A program describes its options as a table of struct opt_def rows (one
 * per option: long name, kind, flags, field, default, range, help) and an
 * opt_spec (its name, its environment prefix, the command being run).
 * opt_load() fills a caller's struct from that table: built-in default <
 * environment variable (PREFIX + the name upper-cased, '-' as '_') <
 * command-line flag. It parses every kind of value the same way (one parser
 * per kind; a bare number given as a duration means seconds everywhere),
 * never quotes a secret back, overwrites passwords in argv once copied, and
 * treats "--" as the end of the options. opt_print_options() prints --help's
 * option list from the same rows.
 *
 * Library code: nothing is logged. Errors are one line in the caller's
 * buffer, naming the flag or variable and the fix; warnings go to the spec's
 * warn callback.
 */
#ifndef RELAY_OPT_H
#define RELAY_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Milliseconds per duration unit, bytes per size unit. */
#define OPT_MS_SECOND INT64_C(1000)
#define OPT_MS_MINUTE (60 * OPT_MS_SECOND)
#define OPT_MS_HOUR (60 * OPT_MS_MINUTE)
#define OPT_MS_DAY (24 * OPT_MS_HOUR)
#define OPT_KIB INT64_C(1024)
#define OPT_MIB (1024 * OPT_KIB)
#define OPT_GIB (1024 * OPT_MIB)

/* Longest file a --*-password-file may name, in bytes. */
#define OPT_SECRET_FILE_MAX (64 * 1024)

enum opt_result {
	OPT_OK = 0,  /* the struct is filled */
	OPT_HELP,    /* --help printed to stdout, exit 0 */
	OPT_VERSION, /* --version printed to stdout, exit 0 */
	OPT_ERROR    /* err holds one line naming the option and the fix; exit 2 */
};

enum opt_kind {
	OPT_GROUP,      /* not an option: the title of the --help section that follows */
	OPT_STRING,     /* char *, strdup'd */
	OPT_BOOL,       /* bool; --name, --no-name, --name=false */
	OPT_DURATION,   /* int or int64_t milliseconds (whole seconds with OPT_F_SECONDS) */
	OPT_INT,        /* int64_t */
	OPT_SIZE,       /* int64_t bytes */
	OPT_LSN,        /* lsn_t */
	OPT_LIST,       /* char ** plus a size_t count at aux_offset */
	OPT_LOG_LEVEL,  /* enum log_level */
	OPT_LOG_FORMAT, /* enum log_format */
	OPT_REDIS_URL   /* char * plus struct redis_target at aux_offset */
};

/* Row flags. */
#define OPT_F_REQUIRED 0x001    /* no default; an empty value counts as missing */
#define OPT_F_SECRET 0x002      /* value may hold a password: never quoted, scrubbed in argv */
#define OPT_F_NONEMPTY 0x004    /* "" is rejected */
#define OPT_F_SECONDS 0x008     /* OPT_DURATION stored in whole seconds */
#define OPT_F_QUALIFY 0x010     /* OPT_STRING table name: "name" becomes "public.name" */
#define OPT_F_PASSWORD 0x020    /* with OPT_F_SECRET: the whole value is a password */
#define OPT_F_EMPTY_UNSET 0x040 /* OPT_STRING: "" leaves the field NULL */
#define OPT_F_DEDUP 0x080       /* OPT_LIST: a repeated item is kept once instead of refused */
#define OPT_F_ONLY 0x100        /* accepted only by the commands in cmds, unknown to others */
/*
 * OPT_DURATION under an old name (the row's `alias` is the new one, which
 * wins when both are set): a bare number still means milliseconds, as it
 * did, and gets a warning naming the new spelling. Writes the new row's field.
 */
#define OPT_F_LEGACY_MS 0x200

/* Extra validation of OPT_STRING values: false with a reason (after "...: ") in why. */
typedef bool (*opt_check_fn)(const char *value, char *why, size_t whylen);

struct opt_def {
	const char *name; /* long flag without "--"; the title for OPT_GROUP */
	enum opt_kind kind;
	unsigned flags;      /* OPT_F_* */
	unsigned cmds;       /* commands whose --help lists it (all accept it unless OPT_F_ONLY) */
	size_t offset;       /* field in the caller's struct */
	size_t size;         /* sizeof that field */
	size_t aux_offset;   /* OPT_LIST: count field; OPT_REDIS_URL: parsed target */
	const char *defval;  /* default as it would be typed; NULL: none */
	int64_t min, max;    /* OPT_DURATION (ms), OPT_INT, OPT_SIZE */
	opt_check_fn check;  /* OPT_STRING only; NULL: none */
	const char *metavar; /* placeholder in --help; NULL for OPT_BOOL */
	const char *help;
	const char *alias; /* OPT_F_REQUIRED: how to fix a missing value; OPT_F_LEGACY_MS: new name */
};

/*
 * A row, positionally: keeps each table row to a line or two. Arguments:
 * name, kind, flags, cmds, offset, size, aux_offset, defval, min, max,
 * check, metavar, help, alias (through OPT_ROW_, so that one argument may be
 * a macro giving the offset and the size).
 */
#define OPT_ROW(...) OPT_ROW_(__VA_ARGS__)
#define OPT_ROW_(name, kind, flags, cmds, off, size, aux, def, min, max, check, meta, help, alias) \
	{                                                                                              \
		name, kind, flags, cmds, off, size, aux, def, min, max, check, meta, help, alias           \
	}
#define OPT_SECTION(title)                                                                         \
	OPT_ROW(title, OPT_GROUP, 0, ~0u, 0, 0, 0, NULL, 0, 0, NULL, NULL, NULL, NULL)

struct opt_spec {
	const char *prog;       /* "outbox-relay status": named in errors ("run PROG --help") */
	const char *env_prefix; /* "OUTBOX_RELAY_" */
	const struct opt_def *rows;
	size_t nrows;
	unsigned cmd;               /* the command loading: tested against rows' cmds */
	void (*usage)(FILE *out);   /* --help */
	void (*version)(FILE *out); /* --version */
	/* A line for the caller to log once logging is set up; cf is opt_load's. */
	void (*warn)(void *cf, const char *line);
};

/*
 * Fill cf (zeroed by the caller) from the rows' defaults, then envp
 * (NULL-terminated "NAME=value"; unknown PREFIX* names are ignored, the
 * first of a repeated name wins), then argv. Prints only for --help and
 * --version (to stdout). Secret values are overwritten in argv (all of it
 * for OPT_F_PASSWORD, its password parts otherwise: opt_scrub_secret) once
 * copied, also a value a later occurrence replaced; argv must be writable.
 * On OPT_ERROR cf may hold part of the values: free it with opt_free().
 */
enum opt_result opt_load(const struct opt_spec *spec, void *cf, int argc, char **argv, char **envp,
                         char *err, size_t errlen);

/* Free what opt_load() allocated into cf (strings, lists, Redis targets); NULL is a no-op. */
void opt_free(const struct opt_spec *spec, void *cf);

/* --help's option list: the section titles and the rows spec->cmd lists. */
void opt_print_options(const struct opt_spec *spec, FILE *out);

/* The variable of o: spec->env_prefix + o->name upper-cased, '-' as '_'. */
void opt_env_name(const struct opt_spec *spec, const struct opt_def *o, char *buf, size_t len);

/*
 * Parse a duration: "250ms", "10s", "5m", "1h", "2d", or a bare integer
 * meaning seconds. Returns false on junk, negative or overflowing values.
 */
bool opt_parse_duration_ms(const char *s, int64_t *ret_ms);

/* true/false, 1/0, yes/no, on/off (any case). False on anything else. */
bool opt_parse_bool(const char *s, bool *ret);

/*
 * Comma-separated lists as the environment gives them ("a, b,c"): each call
 * yields the next item of *cursor with blanks around it trimmed (possibly
 * empty) and advances *cursor; false when the list is exhausted. Start with
 * *cursor = the list.
 */
bool opt_list_next(const char **cursor, const char **item, size_t *len);

/* Append a copy of item[0..len) to the string vector *items (*count entries); false on OOM. */
bool opt_strv_push(char ***items, size_t *count, const char *item, size_t len);

/*
 * Read the first line of path into *ret (malloc'd, CR/LF removed) for option
 * --opt. The whole file is read; over OPT_SECRET_FILE_MAX bytes, an empty
 * first line or a NUL byte in it is an error. The one-line error names the
 * option and the file, never the content. warn (may be NULL) gets one line,
 * or "", when the file is open to its group or others (mode & 077), unless it
 * is a Kubernetes Secret volume file (a "..data/" symlink, 0644 by default).
 */
bool opt_read_secret(const char *opt, const char *path, char **ret, char *warn, size_t warnlen,
                     char *err, size_t errlen);

/*
 * Replace *field (a password, wiped and freed; may be NULL) with the first
 * line of path, read by opt_read_secret(). A warning line goes to
 * spec->warn(cf, ...). False with err on a read error; *field is unchanged then.
 */
bool opt_replace_secret(const struct opt_spec *spec, void *cf, const char *opt, const char *path,
                        char **field, char *err, size_t errlen);

/*
 * Overwrite in place the passwords in a connection string or URL (conninfo
 * password=/sslpassword=, URI user:PASSWORD@, postgresql URI ?password=):
 * each becomes "***" (shorter if it was), the rest moves up and the freed
 * bytes at the end become NUL. For argv, so /proc/PID/cmdline and ps show
 * no password. NULL is a no-op; a value without one is unchanged.
 */
void opt_scrub_secret(char *value);

#endif
