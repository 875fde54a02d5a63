/*
 * pgoutput.c - decoder for the pgoutput logical replication protocol.
 *
 * One protocol message in, zero or one struct w2j_change out, rendered as
 * wal2json 2.5 (format-version 2) renders the same change, so that the relay
 * does not care which plugin its slot uses. Pure: no I/O, no logging;
 * failures leave a one-line message behind for pgo_errmsg().
 *
 * The protocol (PostgreSQL's logicalproto.c, version 1): every integer is
 * big-endian; strings are NUL-terminated; a Relation message describes a
 * table (OID, names, columns with type OID and typmod) before the first
 * change to it and again after its schema changed, so the cache entry is
 * replaced whole. Column values come as text ('t', the type's output
 * function in the walsender's session), NULL ('n') or unchanged TOAST ('u').
 *
 * Memory: the relation cache and the type names belong to the decoder. The
 * values of one message are copied into one arena, sized by a first pass
 * over the tuple before the second fills it, so pointers into it never move.
 */
#include "pgoutput.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Type OIDs wal2json's pg_decode_write_value() treats specially. */
enum {
	OID_BOOL = 16,
	OID_BYTEA = 17,
	OID_INT8 = 20,
	OID_INT2 = 21,
	OID_INT4 = 23,
	OID_OID = 26,
	OID_FLOAT4 = 700,
	OID_FLOAT8 = 701,
	OID_NUMERIC = 1700
};

/* How format_type() prints a typmod after the type's name. */
enum typmod_style {
	TM_NONE,     /* no typmod */
	TM_CHAR,     /* "character(n)" / "character varying(n)", n = typmod - 4 */
	TM_NUMERIC,  /* "numeric(p,s)" */
	TM_TIME,     /* "time(p) without time zone" and the like: name split at the space */
	TM_INTERVAL, /* "interval day to second(p)" */
	TM_BIT       /* "bit(n)", "bit varying(n)" */
};

/*
 * The built-in types (pg_catalog, OID below 10000, which pgoutput never
 * describes with a Type message) and their array types, named as
 * format_type(oid, -1) names them on PostgreSQL 15. with_typmod is the name
 * before a typmod (bpchar becomes "character" only with one).
 */
struct builtin_type {
	uint32_t oid, array_oid;
	const char *name, *with_typmod;
	enum typmod_style tm;
};

static const struct builtin_type builtin_types[] = {
    {16, 1000, "boolean", NULL, TM_NONE},
    {17, 1001, "bytea", NULL, TM_NONE},
    {18, 1002, "\"char\"", NULL, TM_NONE},
    {19, 1003, "name", NULL, TM_NONE},
    {20, 1016, "bigint", NULL, TM_NONE},
    {21, 1005, "smallint", NULL, TM_NONE},
    {22, 1006, "int2vector", NULL, TM_NONE},
    {23, 1007, "integer", NULL, TM_NONE},
    {24, 1008, "regproc", NULL, TM_NONE},
    {25, 1009, "text", NULL, TM_NONE},
    {26, 1028, "oid", NULL, TM_NONE},
    {27, 1010, "tid", NULL, TM_NONE},
    {28, 1011, "xid", NULL, TM_NONE},
    {29, 1012, "cid", NULL, TM_NONE},
    {30, 1013, "oidvector", NULL, TM_NONE},
    {114, 199, "json", NULL, TM_NONE},
    {142, 143, "xml", NULL, TM_NONE},
    {600, 1017, "point", NULL, TM_NONE},
    {601, 1018, "lseg", NULL, TM_NONE},
    {602, 1019, "path", NULL, TM_NONE},
    {603, 1020, "box", NULL, TM_NONE},
    {604, 1027, "polygon", NULL, TM_NONE},
    {628, 629, "line", NULL, TM_NONE},
    {650, 651, "cidr", NULL, TM_NONE},
    {700, 1021, "real", NULL, TM_NONE},
    {701, 1022, "double precision", NULL, TM_NONE},
    {718, 719, "circle", NULL, TM_NONE},
    {774, 775, "macaddr8", NULL, TM_NONE},
    {790, 791, "money", NULL, TM_NONE},
    {829, 1040, "macaddr", NULL, TM_NONE},
    {869, 1041, "inet", NULL, TM_NONE},
    {1033, 1034, "aclitem", NULL, TM_NONE},
    {1042, 1014, "bpchar", "character", TM_CHAR},
    {1043, 1015, "character varying", "character varying", TM_CHAR},
    {1082, 1182, "date", NULL, TM_NONE},
    {1083, 1183, "time without time zone", "time without time zone", TM_TIME},
    {1114, 1115, "timestamp without time zone", "timestamp without time zone", TM_TIME},
    {1184, 1185, "timestamp with time zone", "timestamp with time zone", TM_TIME},
    {1186, 1187, "interval", "interval", TM_INTERVAL},
    {1266, 1270, "time with time zone", "time with time zone", TM_TIME},
    {1560, 1561, "\"bit\"", "bit", TM_BIT},
    {1562, 1563, "bit varying", "bit varying", TM_BIT},
    {1700, 1231, "numeric", "numeric", TM_NUMERIC},
    {1790, 2201, "refcursor", NULL, TM_NONE},
    {2202, 2207, "regprocedure", NULL, TM_NONE},
    {2203, 2208, "regoper", NULL, TM_NONE},
    {2204, 2209, "regoperator", NULL, TM_NONE},
    {2205, 2210, "regclass", NULL, TM_NONE},
    {2206, 2211, "regtype", NULL, TM_NONE},
    {2950, 2951, "uuid", NULL, TM_NONE},
    {2970, 2949, "txid_snapshot", NULL, TM_NONE},
    {3220, 3221, "pg_lsn", NULL, TM_NONE},
    {3614, 3643, "tsvector", NULL, TM_NONE},
    {3615, 3645, "tsquery", NULL, TM_NONE},
    {3642, 3644, "gtsvector", NULL, TM_NONE},
    {3734, 3735, "regconfig", NULL, TM_NONE},
    {3769, 3770, "regdictionary", NULL, TM_NONE},
    {3802, 3807, "jsonb", NULL, TM_NONE},
    {3904, 3905, "int4range", NULL, TM_NONE},
    {3906, 3907, "numrange", NULL, TM_NONE},
    {3908, 3909, "tsrange", NULL, TM_NONE},
    {3910, 3911, "tstzrange", NULL, TM_NONE},
    {3912, 3913, "daterange", NULL, TM_NONE},
    {3926, 3927, "int8range", NULL, TM_NONE},
    {4072, 4073, "jsonpath", NULL, TM_NONE},
    {4089, 4090, "regnamespace", NULL, TM_NONE},
    {4096, 4097, "regrole", NULL, TM_NONE},
    {4191, 4192, "regcollation", NULL, TM_NONE},
    {4451, 6150, "int4multirange", NULL, TM_NONE},
    {4532, 6151, "nummultirange", NULL, TM_NONE},
    {4533, 6152, "tsmultirange", NULL, TM_NONE},
    {4534, 6153, "tstzmultirange", NULL, TM_NONE},
    {4535, 6155, "datemultirange", NULL, TM_NONE},
    {4536, 6157, "int8multirange", NULL, TM_NONE},
    {5038, 5039, "pg_snapshot", NULL, TM_NONE},
    {5069, 271, "xid8", NULL, TM_NONE},
};

struct pgo_column {
	char *name;
	size_t name_len;
	uint32_t typoid;
	int32_t typmod;
	char *type; /* rendered for type_gen; NULL when nothing names the OID */
	size_t type_len;
};

struct pgo_relation {
	uint32_t oid;
	char *schema, *table;
	size_t schema_len, table_len;
	struct pgo_column *cols;
	uint16_t ncols;
	unsigned type_gen; /* the decoder's type_gen the column types were rendered for */
};

/* A type named by the caller (user) or by a Type message (typmsg). */
struct pgo_typename {
	uint32_t oid;
	char *user, *typmsg;
};

struct pgo_decoder {
	struct pgo_relation *rels; /* sorted by oid */
	size_t nrels, caprels;
	struct pgo_typename *types; /* sorted by oid */
	size_t ntypes, captypes;
	unsigned type_gen; /* bumped whenever a type's name changes */

	bool in_txn;
	uint32_t xid;
	char ts[64]; /* the transaction's commit time, rendered */
	size_t ts_len;

	struct w2j_field *fields;
	size_t capfields;
	char *arena;
	size_t caparena;

	/* The rest of a Truncate: relation OIDs still to hand out through pgo_next(). */
	uint32_t *trunc;
	size_t ntrunc, trunc_pos, captrunc;
	struct w2j_change trunc_tmpl;

	char typebuf[512];
	char err[256];
	bool oom; /* the last pgo_decode() failed for lack of memory */
};

/* ---- small helpers ---- */

static bool fail(struct pgo_decoder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool fail(struct pgo_decoder *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(d->err, sizeof(d->err), fmt, ap);
	va_end(ap);
	return false;
}

/* fail() for an allocation that failed: pgo_out_of_memory() tells it apart. */
static bool fail_oom(struct pgo_decoder *d)
{
	d->oom = true;
	return fail(d, "out of memory");
}

/* Grow *p (of *cap elements of size sz) to hold at least n. */
static bool grow(void **p, size_t *cap, size_t n, size_t sz)
{
	size_t c = *cap ? *cap : 8;
	void *q;

	if (n <= *cap)
		return true;
	while (c < n) {
		if (c > SIZE_MAX / 2 / sz)
			return false;
		c *= 2;
	}
	q = realloc(*p, c * sz);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

static char *dup_mem(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

/* A bounds-checked big-endian reader over one message. */
struct rd {
	const unsigned char *p;
	size_t len, pos;
};

static bool rd_need(const struct rd *r, size_t n)
{
	return r->len - r->pos >= n;
}

static bool rd_u8(struct rd *r, uint8_t *v)
{
	if (!rd_need(r, 1))
		return false;
	*v = r->p[r->pos++];
	return true;
}

static bool rd_u16(struct rd *r, uint16_t *v)
{
	if (!rd_need(r, 2))
		return false;
	*v = (uint16_t)((unsigned)r->p[r->pos] << 8 | r->p[r->pos + 1]);
	r->pos += 2;
	return true;
}

static bool rd_u32(struct rd *r, uint32_t *v)
{
	const unsigned char *b = r->p + r->pos;

	if (!rd_need(r, 4))
		return false;
	*v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
	r->pos += 4;
	return true;
}

static bool rd_u64(struct rd *r, uint64_t *v)
{
	uint32_t hi = 0, lo = 0;

	if (!rd_need(r, 8))
		return false;
	rd_u32(r, &hi);
	rd_u32(r, &lo);
	*v = (uint64_t)hi << 32 | lo;
	return true;
}

/* A NUL-terminated string inside the message; *s points into it. */
static bool rd_str(struct rd *r, const char **s, size_t *n)
{
	const unsigned char *nul;

	if (r->pos >= r->len)
		return false;
	nul = memchr(r->p + r->pos, '\0', r->len - r->pos);
	if (!nul)
		return false;
	*s = (const char *)r->p + r->pos;
	*n = (size_t)(nul - (r->p + r->pos));
	r->pos += *n + 1;
	return true;
}

static bool rd_end(const struct rd *r)
{
	return r->pos == r->len;
}

/* ---- type names ---- */

static const struct builtin_type *builtin_lookup(uint32_t oid, bool *is_array)
{
	for (size_t i = 0; i < sizeof(builtin_types) / sizeof(builtin_types[0]); i++) {
		if (builtin_types[i].oid == oid || builtin_types[i].array_oid == oid) {
			*is_array = builtin_types[i].array_oid == oid;
			return &builtin_types[i];
		}
	}
	return NULL;
}

static struct pgo_typename *typename_find(struct pgo_decoder *d, uint32_t oid, size_t *at)
{
	size_t lo = 0, hi = d->ntypes;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->types[mid].oid < oid)
			lo = mid + 1;
		else
			hi = mid;
	}
	*at = lo;
	return lo < d->ntypes && d->types[lo].oid == oid ? &d->types[lo] : NULL;
}

/* The entry for oid, added (with no names) when missing; NULL when out of memory. */
static struct pgo_typename *typename_get(struct pgo_decoder *d, uint32_t oid)
{
	size_t at;
	struct pgo_typename *t = typename_find(d, oid, &at);

	if (t)
		return t;
	if (!grow((void **)&d->types, &d->captypes, d->ntypes + 1, sizeof(*d->types)))
		return NULL;
	memmove(&d->types[at + 1], &d->types[at], (d->ntypes - at) * sizeof(*d->types));
	d->ntypes++;
	d->types[at] = (struct pgo_typename){.oid = oid};
	return &d->types[at];
}

/* The typmod text format_type() prints for a built-in type, into out. */
static void typmod_text(const struct builtin_type *bt, int32_t typmod, char *out, size_t size)
{
	/* Unsigned arithmetic: typmod is whatever the message said. */
	uint32_t t = (uint32_t)typmod;

	out[0] = '\0';
	switch (bt->tm) {
	case TM_CHAR:
		if (typmod > 4)
			snprintf(out, size, "(%d)", typmod - 4);
		break;
	case TM_NUMERIC:
		snprintf(out, size, "(%d,%d)", (int)(((t - 4) >> 16) & 0xffff),
		         (int)((((t - 4) & 0x7ff) ^ 1024)) - 1024);
		break;
	case TM_TIME:
	case TM_BIT:
		snprintf(out, size, "(%d)", typmod);
		break;
	case TM_INTERVAL: {
		/* The field masks of PostgreSQL's datetime.h: MONTH 1, YEAR 2, DAY 3,
		 * HOUR 10, MINUTE 11, SECOND 12; 0x7FFF is "all fields". */
		static const struct {
			uint32_t mask;
			const char *text;
		} ranges[] = {
		    {1u << 2, " year"},
		    {1u << 1, " month"},
		    {1u << 3, " day"},
		    {1u << 10, " hour"},
		    {1u << 11, " minute"},
		    {1u << 12, " second"},
		    {1u << 2 | 1u << 1, " year to month"},
		    {1u << 3 | 1u << 10, " day to hour"},
		    {1u << 3 | 1u << 10 | 1u << 11, " day to minute"},
		    {1u << 3 | 1u << 10 | 1u << 11 | 1u << 12, " day to second"},
		    {1u << 10 | 1u << 11, " hour to minute"},
		    {1u << 10 | 1u << 11 | 1u << 12, " hour to second"},
		    {1u << 11 | 1u << 12, " minute to second"},
		};
		uint32_t range = (t >> 16) & 0x7fff, prec = t & 0xffff;
		const char *fields = "";

		for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
			if (ranges[i].mask == range)
				fields = ranges[i].text;
		if (prec != 0xffff)
			snprintf(out, size, "%s(%u)", fields, prec);
		else
			snprintf(out, size, "%s", fields);
		break;
	}
	case TM_NONE:
		break;
	}
}

/* A built-in type's name with its typmod, as format_type() writes it. */
static void builtin_name(const struct builtin_type *bt, bool is_array, int32_t typmod, char *out,
                         size_t size)
{
	char tm[64];
	const char *arr = is_array ? "[]" : "";

	if (typmod < 0 || bt->tm == TM_NONE) {
		snprintf(out, size, "%s%s", bt->name, arr);
		return;
	}
	typmod_text(bt, typmod, tm, sizeof(tm));
	if (bt->tm == TM_TIME) {
		/* "timestamp(3) with time zone": the typmod goes after the first word. */
		const char *sp = strchr(bt->with_typmod, ' ');

		snprintf(out, size, "%.*s%s%s%s", (int)(sp - bt->with_typmod), bt->with_typmod, tm, sp,
		         arr);
		return;
	}
	snprintf(out, size, "%s%s%s", bt->with_typmod, tm, arr);
}

/* quote_identifier() without the keyword list: lower-case letters, digits and '_' are safe. */
static void quote_ident(const char *s, size_t n, char *out, size_t size)
{
	bool safe = n > 0 && ((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_');
	size_t o = 0;

	for (size_t i = 0; i < n && safe; i++)
		safe = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_';
	if (safe) {
		snprintf(out, size, "%.*s", (int)n, s);
		return;
	}
	if (size < 3) {
		out[0] = '\0';
		return;
	}
	out[o++] = '"';
	for (size_t i = 0; i < n && o + 3 < size; i++) {
		if (s[i] == '"')
			out[o++] = '"';
		out[o++] = s[i];
	}
	out[o++] = '"';
	out[o] = '\0';
}

/*
 * A Type message's namespace and name as format_type() would print them: a
 * name starting with '_' is taken as the array type of the rest; types in
 * pg_catalog ("") and public (on the default search_path) are not qualified.
 */
static char *typmsg_name(const char *nsp, size_t nsp_len, const char *name, size_t name_len)
{
	char qn[200], qs[200], out[420];
	bool is_array = name_len > 1 && name[0] == '_';

	if (is_array) {
		name++;
		name_len--;
	}
	quote_ident(name, name_len, qn, sizeof(qn));
	if (nsp_len == 0 || (nsp_len == 6 && memcmp(nsp, "public", 6) == 0) ||
	    (nsp_len == 10 && memcmp(nsp, "pg_catalog", 10) == 0)) {
		snprintf(out, sizeof(out), "%s%s", qn, is_array ? "[]" : "");
	} else {
		quote_ident(nsp, nsp_len, qs, sizeof(qs));
		snprintf(out, sizeof(out), "%s.%s%s", qs, qn, is_array ? "[]" : "");
	}
	return dup_mem(out, strlen(out));
}

const char *pgo_type_name(struct pgo_decoder *d, uint32_t oid, int32_t typmod)
{
	const struct builtin_type *bt;
	struct pgo_typename *t;
	size_t at, n;
	bool is_array;
	char *s = d->typebuf;

	t = typename_find(d, oid, &at);
	if (t && t->user)
		snprintf(s, sizeof(d->typebuf), "%s", t->user);
	else if ((bt = builtin_lookup(oid, &is_array)))
		builtin_name(bt, is_array, typmod, s, sizeof(d->typebuf));
	else if (t && t->typmsg)
		snprintf(s, sizeof(d->typebuf), "%s", t->typmsg);
	else
		return NULL;
	/* wal2json prints a name format_type() quoted as it is, so its JSON string
	 * loses the quotes; a quoted array name ("T"[]) it escapes and keeps. */
	n = strlen(s);
	if (n >= 2 && s[0] == '"' && s[n - 1] != ']') {
		memmove(s, s + 1, n - 1);
		s[n - 1] = '\0';
		if (n >= 3 && s[n - 2] == '"')
			s[n - 2] = '\0';
	}
	return s;
}

bool pgo_set_type_name(struct pgo_decoder *d, uint32_t oid, const char *name)
{
	struct pgo_typename *t = typename_get(d, oid);
	char *copy = name ? dup_mem(name, strlen(name)) : NULL;

	if (!t || (name && !copy)) {
		free(copy);
		return fail_oom(d);
	}
	free(t->user);
	t->user = copy;
	d->type_gen++;
	return true;
}

/* Render the type names of rel's columns when a type's name changed since. */
static bool relation_types(struct pgo_decoder *d, struct pgo_relation *rel)
{
	if (rel->type_gen == d->type_gen)
		return true;
	for (uint16_t i = 0; i < rel->ncols; i++) {
		struct pgo_column *c = &rel->cols[i];
		const char *s = pgo_type_name(d, c->typoid, c->typmod);

		free(c->type);
		c->type = NULL;
		c->type_len = 0;
		if (s) {
			c->type_len = strlen(s);
			c->type = dup_mem(s, c->type_len);
			if (!c->type)
				return fail_oom(d);
		}
	}
	rel->type_gen = d->type_gen;
	return true;
}

/* ---- the relation cache ---- */

static void relation_free(struct pgo_relation *rel)
{
	for (uint16_t i = 0; i < rel->ncols; i++) {
		free(rel->cols[i].name);
		free(rel->cols[i].type);
	}
	free(rel->cols);
	free(rel->schema);
	free(rel->table);
}

static struct pgo_relation *relation_find(struct pgo_decoder *d, uint32_t oid, size_t *at)
{
	size_t lo = 0, hi = d->nrels;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->rels[mid].oid < oid)
			lo = mid + 1;
		else
			hi = mid;
	}
	*at = lo;
	return lo < d->nrels && d->rels[lo].oid == oid ? &d->rels[lo] : NULL;
}

/* The cached relation with this OID, its column types rendered; NULL (and an error) if none. */
static struct pgo_relation *relation_get(struct pgo_decoder *d, uint32_t oid, char msg)
{
	size_t at;
	struct pgo_relation *rel = relation_find(d, oid, &at);

	if (!rel) {
		fail(d, "pgoutput '%c' for relation OID %u, which no Relation message described", msg, oid);
		return NULL;
	}
	return relation_types(d, rel) ? rel : NULL;
}

/* 'R': relid, namespace, name, replica identity, columns (flags, name, type OID, typmod). */
static bool decode_relation(struct pgo_decoder *d, struct rd *r)
{
	struct pgo_relation rel = {0}, *old;
	const char *nsp, *name;
	size_t nsp_len, name_len, at;
	uint8_t ident;

	if (!rd_u32(r, &rel.oid) || !rd_str(r, &nsp, &nsp_len) || !rd_str(r, &name, &name_len) ||
	    !rd_u8(r, &ident) || !rd_u16(r, &rel.ncols))
		return fail(d, "pgoutput Relation message is truncated");
	/* Each column takes at least 10 bytes: do not allocate for more than the message holds. */
	if (rel.ncols > (r->len - r->pos) / 10)
		return fail(d, "pgoutput Relation message is truncated (%u columns)", rel.ncols);
	rel.cols = calloc(rel.ncols ? rel.ncols : 1, sizeof(*rel.cols));
	rel.schema = dup_mem(nsp, nsp_len);
	rel.table = dup_mem(name, name_len);
	rel.schema_len = nsp_len;
	rel.table_len = name_len;
	rel.type_gen = d->type_gen - 1; /* render at first use */
	if (!rel.cols || !rel.schema || !rel.table) {
		relation_free(&rel);
		return fail_oom(d);
	}
	for (uint16_t i = 0; i < rel.ncols; i++) {
		struct pgo_column *c = &rel.cols[i];
		uint8_t flags;
		uint32_t typmod;
		const char *cn;
		size_t cn_len;

		if (!rd_u8(r, &flags) || !rd_str(r, &cn, &cn_len) || !rd_u32(r, &c->typoid) ||
		    !rd_u32(r, &typmod)) {
			relation_free(&rel);
			return fail(d, "pgoutput Relation message is truncated (column %u)", i + 1);
		}
		c->typmod = (int32_t)typmod;
		c->name_len = cn_len;
		c->name = dup_mem(cn, cn_len);
		if (!c->name) {
			relation_free(&rel);
			return fail_oom(d);
		}
	}
	if (!rd_end(r)) {
		relation_free(&rel);
		return fail(d, "pgoutput Relation message has %zu bytes after its columns",
		            r->len - r->pos);
	}
	/* A second Relation message for the OID (ALTER TABLE) replaces the entry whole. */
	old = relation_find(d, rel.oid, &at);
	if (old) {
		relation_free(old);
		*old = rel;
		return true;
	}
	if (!grow((void **)&d->rels, &d->caprels, d->nrels + 1, sizeof(*d->rels))) {
		relation_free(&rel);
		return fail_oom(d);
	}
	memmove(&d->rels[at + 1], &d->rels[at], (d->nrels - at) * sizeof(*d->rels));
	d->rels[at] = rel;
	d->nrels++;
	return true;
}

/* 'Y': type OID, namespace ("" for pg_catalog), name. */
static bool decode_type(struct pgo_decoder *d, struct rd *r)
{
	uint32_t oid;
	const char *nsp, *name;
	size_t nsp_len, name_len;
	struct pgo_typename *t;
	char *s;

	if (!rd_u32(r, &oid) || !rd_str(r, &nsp, &nsp_len) || !rd_str(r, &name, &name_len))
		return fail(d, "pgoutput Type message is truncated");
	if (!rd_end(r))
		return fail(d, "pgoutput Type message has %zu bytes after its name", r->len - r->pos);
	s = typmsg_name(nsp, nsp_len, name, name_len);
	t = typename_get(d, oid);
	if (!s || !t) {
		free(s);
		return fail_oom(d);
	}
	if (t->typmsg && strcmp(t->typmsg, s) == 0) {
		free(s); /* sent again with every Relation: nothing changed */
		return true;
	}
	free(t->typmsg);
	t->typmsg = s;
	d->type_gen++;
	return true;
}

/* ---- values ---- */

static bool has_prefix_ci(const char *s, size_t n, const char *p)
{
	size_t pn = strlen(p);

	return n >= pn && strncasecmp(s, p, pn) == 0;
}

/* Types wal2json prints as bare numbers. */
static bool is_number(uint32_t typoid)
{
	switch (typoid) {
	case OID_INT2:
	case OID_INT4:
	case OID_INT8:
	case OID_OID:
	case OID_FLOAT4:
	case OID_FLOAT8:
	case OID_NUMERIC:
		return true;
	default:
		return false;
	}
}

/* Numbers and booleans are rendered, never kept by reference. */
static bool rendered(const struct pgo_column *c)
{
	return is_number(c->typoid) || c->typoid == OID_BOOL;
}

/* bytea_output 'hex', which the relay sets: "\x…", whose "\x" wal2json leaves out. */
static bool hex_bytea(const struct pgo_column *c, const char *v, size_t n)
{
	return c->typoid == OID_BYTEA && n >= 2 && v[0] == '\\' && v[1] == 'x';
}

/* A string value left in the message (pgoutput.h, Ownership): decided on the value as
 * rendered (a bytea without its "\x"), so every shorter one is copied and NUL-terminated. */
static bool by_reference(const struct pgo_column *c, const char *v, size_t n)
{
	return (hex_bytea(c, v, n) ? n - 2 : n) >= PGO_BY_REFERENCE && !rendered(c);
}

/*
 * One text value as wal2json's pg_decode_write_value() writes it for this
 * type OID: numbers bare (NaN and infinities as null, anything else is an
 * error there too), booleans true/false, bytea without its "\x", the rest
 * as strings. Copies into the arena at *used.
 */
static bool render_value(struct pgo_decoder *d, const struct pgo_column *c, const char *v, size_t n,
                         struct w2j_field *f, size_t *used)
{
	char *dst = d->arena + *used;
	bool ref = by_reference(c, v, n); /* as decode_tuple() decided when it sized the arena */

	if (is_number(c->typoid)) {
		if (has_prefix_ci(v, n, "NaN") || has_prefix_ci(v, n, "Infinity") ||
		    has_prefix_ci(v, n, "-Infinity")) {
			f->kind = W2J_KIND_NULL;
			f->value = NULL;
			f->value_len = 0;
			return true;
		}
		for (size_t i = 0; i < n; i++)
			if (!strchr("0123456789+-eE.", v[i]) || v[i] == '\0')
				return fail(d, "column \"%s\": \"%.*s\" is not a number", c->name,
				            n > 64 ? 64 : (int)n, v);
		if (n == 0)
			return fail(d, "column \"%s\": an empty number", c->name);
		f->kind = W2J_KIND_NUMBER;
	} else if (c->typoid == OID_BOOL) {
		f->kind = W2J_KIND_BOOL;
		f->value = n == 1 && v[0] == 't' ? "true" : "false";
		f->value_len = strlen(f->value);
		return true;
	} else {
		if (hex_bytea(c, v, n)) {
			v += 2;
			n -= 2;
		}
		f->kind = W2J_KIND_STRING;
	}
	if (ref) {
		f->value = v;
		f->value_len = n;
		return true;
	}
	memcpy(dst, v, n);
	dst[n] = '\0';
	f->value = dst;
	f->value_len = n;
	*used += n + 1;
	return true;
}

/*
 * Tuple data: a column count, then per column 'n', 'u' or 't' + length +
 * text. With rel NULL the tuple is only stepped over (an old tuple). Otherwise
 * the columns fill d->fields; unchanged TOAST is left out, as wal2json does.
 */
static bool decode_tuple(struct pgo_decoder *d, struct rd *r, struct pgo_relation *rel,
                         size_t *ret_n)
{
	uint16_t ncols;
	size_t start, need = 0, used = 0, nf = 0;

	if (!rd_u16(r, &ncols))
		return fail(d, "pgoutput tuple data is truncated");
	if (rel && ncols != rel->ncols)
		return fail(d, "pgoutput tuple has %u columns, relation %s.%s has %u", ncols, rel->schema,
		            rel->table, rel->ncols);
	start = r->pos;
	/* Pass 1: check the shape and size the arena. */
	for (uint16_t i = 0; i < ncols; i++) {
		uint8_t kind;
		uint32_t len;

		if (!rd_u8(r, &kind))
			return fail(d, "pgoutput tuple data is truncated (column %u)", i + 1);
		if (kind == 'n' || kind == 'u')
			continue;
		if (kind == 'b')
			return fail(d, "pgoutput binary tuple data is not supported (leave the "
			               "\"binary\" option off)");
		if (kind != 't')
			return fail(d, "pgoutput tuple column %u has unknown kind 0x%02x", i + 1, kind);
		if (!rd_u32(r, &len) || !rd_need(r, len))
			return fail(d, "pgoutput tuple data is truncated (column %u)", i + 1);
		if (!(rel && i < rel->ncols &&
		      by_reference(&rel->cols[i], (const char *)r->p + r->pos, len)))
			need += (size_t)len + 1;
		r->pos += len;
	}
	if (!rel)
		return true;
	if (!grow((void **)&d->arena, &d->caparena, need ? need : 1, 1) ||
	    !grow((void **)&d->fields, &d->capfields, ncols ? ncols : 1, sizeof(*d->fields)))
		return fail_oom(d);
	/* Pass 2: fill, trusting what pass 1 checked. */
	r->pos = start;
	for (uint16_t i = 0; i < ncols; i++) {
		struct pgo_column *c = &rel->cols[i];
		struct w2j_field *f = &d->fields[nf];
		uint8_t kind = 0;
		uint32_t len = 0;

		rd_u8(r, &kind);
		if (kind == 'u')
			continue;
		*f = (struct w2j_field){.name = c->name,
		                        .name_len = c->name_len,
		                        .type = c->type,
		                        .type_len = c->type_len,
		                        .kind = W2J_KIND_NULL};
		nf++;
		if (kind == 'n')
			continue;
		rd_u32(r, &len);
		if (!render_value(d, c, (const char *)r->p + r->pos, len, f, &used))
			return false;
		r->pos += len;
	}
	*ret_n = nf;
	return true;
}

/* ---- transactions ---- */

/*
 * Render a PostgreSQL timestamp (microseconds since 2000-01-01) as
 * timestamptz_to_str() does with DateStyle ISO and TimeZone UTC:
 * "2026-11-21 23:51:54.887293+00", trailing zeros of the fraction dropped,
 * " BC" for years before 1.
 */
static size_t render_timestamp(int64_t t, char *buf, size_t size)
{
	const int64_t day_us = 86400000000LL;
	int64_t days, us, z, era, doe, yoe, doy, mp, y, m, dd;
	int n;

	if (t == INT64_MIN)
		return (size_t)snprintf(buf, size, "-infinity");
	if (t == INT64_MAX)
		return (size_t)snprintf(buf, size, "infinity");
	days = t / day_us;
	us = t % day_us;
	if (us < 0) {
		us += day_us;
		days--;
	}
	if (days + 2451545 < 0) /* before Julian day 0, where PostgreSQL gives up */
		return (size_t)snprintf(buf, size, "(timestamp out of range)");
	/* Proleptic Gregorian civil date from days since 1970-01-01, in 400-year eras. */
	z = days + 10957 + 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	dd = doy - (153 * mp + 2) / 5 + 1;
	m = mp < 10 ? mp + 3 : mp - 9;
	y = yoe + era * 400 + (m <= 2);
	n = snprintf(buf, size, "%04lld-%02lld-%02lld %02lld:%02lld:%02lld",
	             (long long)(y > 0 ? y : 1 - y), (long long)m, (long long)dd,
	             (long long)(us / 3600000000LL), (long long)(us / 60000000 % 60),
	             (long long)(us / 1000000 % 60));
	if (us % 1000000) {
		char frac[8];
		int k = 6;

		snprintf(frac, sizeof(frac), "%06lld", (long long)(us % 1000000));
		while (frac[k - 1] == '0')
			k--;
		n += snprintf(buf + n, size - (size_t)n, ".%.*s", k, frac);
	}
	n += snprintf(buf + n, size - (size_t)n, "+00%s", y > 0 ? "" : " BC");
	return (size_t)n;
}

static bool need_txn(struct pgo_decoder *d, char msg)
{
	if (!d->in_txn)
		return fail(d, "pgoutput '%c' outside a transaction (no Begin before it)", msg);
	return true;
}

/* The fields every change inside a transaction has. */
static void txn_change(struct pgo_decoder *d, enum w2j_action a, lsn_t lsn, struct w2j_change *out)
{
	*out = (struct w2j_change){.action = a,
	                           .has_xid = true,
	                           .xid = d->xid,
	                           .lsn = lsn,
	                           .nextlsn = LSN_INVALID,
	                           .timestamp = d->ts,
	                           .timestamp_len = d->ts_len};
}

/* 'B': final LSN, commit time, xid. */
static bool decode_begin(struct pgo_decoder *d, struct rd *r, struct w2j_change *out)
{
	uint64_t final_lsn, ts;
	uint32_t xid;

	if (!rd_u64(r, &final_lsn) || !rd_u64(r, &ts) || !rd_u32(r, &xid) || !rd_end(r))
		return fail(d, "pgoutput Begin message is %zu bytes, not 21", r->len);
	d->in_txn = true;
	d->xid = xid;
	d->ts_len = render_timestamp((int64_t)ts, d->ts, sizeof(d->ts));
	txn_change(d, W2J_BEGIN, final_lsn, out);
	return true;
}

/* 'C': flags, commit LSN, end LSN, commit time. */
static bool decode_commit(struct pgo_decoder *d, struct rd *r, struct w2j_change *out)
{
	uint8_t flags;
	uint64_t lsn, end, ts;

	if (!rd_u8(r, &flags) || !rd_u64(r, &lsn) || !rd_u64(r, &end) || !rd_u64(r, &ts) || !rd_end(r))
		return fail(d, "pgoutput Commit message is %zu bytes, not 26", r->len);
	if (!need_txn(d, 'C'))
		return false;
	d->in_txn = false;
	d->ts_len = render_timestamp((int64_t)ts, d->ts, sizeof(d->ts));
	txn_change(d, W2J_COMMIT, lsn, out);
	out->nextlsn = end;
	return true;
}

/* 'M': flags (1 = transactional), LSN, prefix, content length, content. */
static bool decode_message(struct pgo_decoder *d, struct rd *r, struct w2j_change *out)
{
	uint8_t flags;
	uint64_t lsn;
	uint32_t len;
	const char *prefix, *content;
	size_t prefix_len;
	char *a;

	if (!rd_u8(r, &flags) || !rd_u64(r, &lsn) || !rd_str(r, &prefix, &prefix_len) ||
	    !rd_u32(r, &len) || !rd_need(r, len))
		return fail(d, "pgoutput Message message is truncated");
	content = (const char *)r->p + r->pos;
	r->pos += len;
	if (!rd_end(r))
		return fail(d, "pgoutput Message message has %zu bytes after its content", r->len - r->pos);
	if (flags & 1) {
		if (!need_txn(d, 'M'))
			return false;
		txn_change(d, W2J_MESSAGE, lsn, out);
		out->transactional = true;
	} else {
		*out = (struct w2j_change){.action = W2J_MESSAGE, .lsn = lsn, .nextlsn = LSN_INVALID};
	}
	/* wal2json copies the content with strncpy(): it ends at the first NUL. */
	{
		const char *nul = memchr(content, '\0', len);

		if (nul)
			len = (uint32_t)(nul - content);
	}
	if (!grow((void **)&d->arena, &d->caparena, prefix_len + len + 2, 1))
		return fail_oom(d);
	a = d->arena;
	memcpy(a, prefix, prefix_len + 1);
	memcpy(a + prefix_len + 1, content, len);
	a[prefix_len + 1 + len] = '\0';
	out->prefix = a;
	out->prefix_len = prefix_len;
	out->content = a + prefix_len + 1;
	out->content_len = len;
	return true;
}

/* 'I', 'U', 'D': relid, then tuples tagged 'K'/'O' (old, skipped) and 'N' (new). */
static bool decode_row(struct pgo_decoder *d, char msg, struct rd *r, lsn_t wal_start,
                       struct w2j_change *out)
{
	uint32_t relid;
	uint8_t tag;
	struct pgo_relation *rel;
	size_t n = 0;

	if (!rd_u32(r, &relid) || !rd_u8(r, &tag))
		return fail(d, "pgoutput '%c' message is truncated", msg);
	if (!need_txn(d, msg) || !(rel = relation_get(d, relid, msg)))
		return false;
	txn_change(d, msg == 'I' ? W2J_INSERT : msg == 'U' ? W2J_UPDATE : W2J_DELETE, wal_start, out);
	out->schema = rel->schema;
	out->schema_len = rel->schema_len;
	out->table = rel->table;
	out->table_len = rel->table_len;
	if (msg != 'I' && (tag == 'K' || tag == 'O')) {
		if (!decode_tuple(d, r, NULL, NULL))
			return false;
		if (msg == 'D') /* wal2json prints a delete's old key as "identity" only */
			goto end;
		if (!rd_u8(r, &tag))
			return fail(d, "pgoutput '%c' message is truncated", msg);
	}
	if (tag != 'N' || msg == 'D')
		return fail(d, "pgoutput '%c' message has tuple tag 0x%02x where %s was expected", msg, tag,
		            msg == 'D' ? "'K' or 'O'" : "'N'");
	if (!decode_tuple(d, r, rel, &n))
		return false;
	out->columns = d->fields;
	out->ncolumns = n;
end:
	if (!rd_end(r))
		return fail(d, "pgoutput '%c' message has %zu bytes after its tuple", msg, r->len - r->pos);
	return true;
}

/* The Truncate change for one relation OID, from the message's template. */
static bool truncate_change(struct pgo_decoder *d, uint32_t relid, struct w2j_change *out)
{
	struct pgo_relation *rel = relation_get(d, relid, 'T');

	if (!rel)
		return false;
	*out = d->trunc_tmpl;
	out->schema = rel->schema;
	out->schema_len = rel->schema_len;
	out->table = rel->table;
	out->table_len = rel->table_len;
	return true;
}

/* 'T': relation count, flags (CASCADE, RESTART IDENTITY), relation OIDs. */
static bool decode_truncate(struct pgo_decoder *d, struct rd *r, lsn_t wal_start,
                            struct w2j_change *out)
{
	uint32_t n;
	uint8_t flags;

	if (!rd_u32(r, &n) || !rd_u8(r, &flags) || (r->len - r->pos) / 4 < n ||
	    r->len - r->pos != (size_t)n * 4)
		return fail(d, "pgoutput Truncate message is truncated or too long");
	if (n == 0)
		return fail(d, "pgoutput Truncate message names no relation");
	if (!need_txn(d, 'T'))
		return false;
	if (!grow((void **)&d->trunc, &d->captrunc, n, sizeof(*d->trunc)))
		return fail_oom(d);
	for (uint32_t i = 0; i < n; i++) {
		rd_u32(r, &d->trunc[i]);
		/* Every relation must be known now: a change handed out later cannot fail late. */
		if (!relation_get(d, d->trunc[i], 'T'))
			return false;
	}
	txn_change(d, W2J_TRUNCATE, wal_start, &d->trunc_tmpl);
	d->ntrunc = n;
	d->trunc_pos = 1;
	return truncate_change(d, d->trunc[0], out);
}

bool pgo_next(struct pgo_decoder *d, struct w2j_change *out)
{
	if (d->trunc_pos >= d->ntrunc)
		return false;
	return truncate_change(d, d->trunc[d->trunc_pos++], out);
}

bool pgo_decode(struct pgo_decoder *d, const char *buf, size_t len, lsn_t wal_start,
                struct w2j_change *out, bool *has_change)
{
	struct rd r = {.p = (const unsigned char *)buf, .len = len};
	uint8_t type;

	*has_change = false;
	d->err[0] = '\0';
	d->oom = false;
	d->ntrunc = d->trunc_pos = 0;
	if (!rd_u8(&r, &type))
		return fail(d, "empty pgoutput message");
	switch (type) {
	case 'B':
		*has_change = decode_begin(d, &r, out);
		return *has_change;
	case 'C':
		*has_change = decode_commit(d, &r, out);
		return *has_change;
	case 'I':
	case 'U':
	case 'D':
		*has_change = decode_row(d, (char)type, &r, wal_start, out);
		return *has_change;
	case 'T':
		*has_change = decode_truncate(d, &r, wal_start, out);
		return *has_change;
	case 'M':
		*has_change = decode_message(d, &r, out);
		return *has_change;
	case 'R':
		return decode_relation(d, &r);
	case 'Y':
		return decode_type(d, &r);
	case 'O': {
		/* Origin: the origin's commit LSN and name; the relay has no use for them. */
		uint64_t lsn;
		const char *name;
		size_t n;

		if (!rd_u64(&r, &lsn) || !rd_str(&r, &name, &n) || !rd_end(&r))
			return fail(d, "pgoutput Origin message is malformed");
		return true;
	}
	case 'S':
	case 'E':
	case 'c':
	case 'A':
	case 'p':
		return fail(d,
		            "pgoutput streaming message '%c' is not supported (use proto_version "
		            "'1' without \"streaming\")",
		            type);
	case 'b':
	case 'P':
	case 'K':
	case 'r':
		return fail(d, "pgoutput two-phase message '%c' is not supported (leave \"two_phase\" off)",
		            type);
	default:
		return fail(d, "unknown pgoutput message type 0x%02x", type);
	}
}

struct pgo_decoder *pgo_create(void)
{
	struct pgo_decoder *d = calloc(1, sizeof(*d));

	if (d)
		d->type_gen = 1;
	return d;
}

void pgo_destroy(struct pgo_decoder *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nrels; i++)
		relation_free(&d->rels[i]);
	for (size_t i = 0; i < d->ntypes; i++) {
		free(d->types[i].user);
		free(d->types[i].typmsg);
	}
	free(d->rels);
	free(d->types);
	free(d->fields);
	free(d->arena);
	free(d->trunc);
	free(d);
}

const char *pgo_errmsg(const struct pgo_decoder *d)
{
	return d->err;
}

bool pgo_out_of_memory(const struct pgo_decoder *d)
{
	return d->oom;
}

/* ---- streaming (protocol version 2): see pgoutput.h ---- */

bool pgo_stream_parse(const char *buf, size_t len, struct pgo_stream_msg *out, char *err,
                      size_t errlen)
{
	struct rd r = {.p = (const unsigned char *)buf, .len = len};
	uint8_t type = 0, u8;
	uint64_t a, b, c;

	*out = (struct pgo_stream_msg){.kind = PGO_NOT_STREAM};
	if (!rd_u8(&r, &type))
		return true;
	switch (type) {
	case 'S':
		if (!rd_u32(&r, &out->xid) || !rd_u8(&r, &u8) || !rd_end(&r))
			break;
		out->kind = PGO_STREAM_START;
		out->first = u8 == 1;
		return true;
	case 'E':
		if (!rd_end(&r))
			break;
		out->kind = PGO_STREAM_STOP;
		return true;
	case 'c':
		if (!rd_u32(&r, &out->xid) || !rd_u8(&r, &u8) || !rd_u64(&r, &a) || !rd_u64(&r, &b) ||
		    !rd_u64(&r, &c) || !rd_end(&r))
			break;
		out->kind = PGO_STREAM_COMMIT;
		out->commit_lsn = a;
		out->end_lsn = b;
		out->commit_time = (int64_t)c;
		return true;
	case 'A':
		/* protocol 4 adds the abort's LSN and time: not asked for */
		if (!rd_u32(&r, &out->xid) || !rd_u32(&r, &out->subxid) || !rd_end(&r))
			break;
		out->kind = PGO_STREAM_ABORT;
		return true;
	default:
		return true;
	}
	snprintf(err, errlen, "pgoutput stream message '%c' is malformed (%zu bytes)", type, len);
	return false;
}

bool pgo_stream_unwrap(char *buf, size_t len, uint32_t *xid, size_t *skip)
{
	const unsigned char *b = (const unsigned char *)buf;

	if (len >= 1 && buf[0] == 'O') {
		*xid = 0;
		*skip = 0;
		return true;
	}
	if (len < 5)
		return false;
	*xid = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
	buf[4] = buf[0];
	*skip = 4;
	return true;
}

static void put_u32(char *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (char)(v & 0xff);
}

static void put_u64(char *p, uint64_t v)
{
	put_u32(p, (uint32_t)(v >> 32));
	put_u32(p + 4, (uint32_t)v);
}

void pgo_stream_begin(const struct pgo_stream_msg *commit, char out[PGO_BEGIN_LEN])
{
	out[0] = 'B';
	put_u64(out + 1, commit->commit_lsn); /* Begin's final LSN: the commit record's start */
	put_u64(out + 9, (uint64_t)commit->commit_time);
	put_u32(out + 17, commit->xid);
}

void pgo_stream_commit(const struct pgo_stream_msg *commit, char out[PGO_COMMIT_LEN])
{
	out[0] = 'C';
	out[1] = 0;
	put_u64(out + 2, commit->commit_lsn);
	put_u64(out + 10, commit->end_lsn);
	put_u64(out + 18, (uint64_t)commit->commit_time);
}
