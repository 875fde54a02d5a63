/*
 * preflight.c - --check-config's checks against the real servers.
 *
 * PostgreSQL: a plain connection reads the catalogs (wal_level, slots and
 * WAL senders in use, output_plugin_libraries, the outbox table, the slot);
 * a replication connection like the relay's proves REPLICATION, and a
 * TEMPORARY slot on it (dropped at once) proves that the output plugin the
 * relay would use (the existing slot's, else --plugin) loads and is allowed;
 * for pgoutput the publication is checked as pgrepl.c's ensure_publication
 * judges it (nothing is created). The outbox table and the slot are read by
 * pg_facts.c, as the relay, status and heal read them. Redis: connect, AUTH, SELECT, COMMAND INFO
 * for every command the relay uses, INFO for the role and the eviction
 * policy; nothing is written.
 */
#include "preflight.h"

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "buf.h"
#include "cluster_slots.h"
#include "event.h"
#include "lsn.h"
#include "pg_facts.h"
#include "pgrepl.h"
#include "redis_conn.h"
#include "redis_sentinel.h"
#include "redis_tls.h"

/* How long the plugin check waits for a temporary slot's consistent point. */
#define SLOT_CHECK_TIMEOUT_MS 10000

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
add(struct preflight *pf, enum preflight_kind kind, const char *fmt, ...)
{
	struct preflight_item *items;
	char line[1200];
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One line each: a server message may carry newlines or tabs. */
	n = strlen(line);
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' '))
		line[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\t' || line[i] == '\r')
			line[i] = ' ';
	if (kind == PREFLIGHT_PROBLEM)
		pf->nproblems++;
	items = realloc(pf->items, (pf->nitems + 1) * sizeof(*items));
	if (!items) {
		pf->oom = true;
		return;
	}
	pf->items = items;
	items[pf->nitems].kind = kind;
	items[pf->nitems].text = strdup(line);
	if (!items[pf->nitems].text) {
		pf->oom = true;
		return;
	}
	pf->nitems++;
}

const char *preflight_kind_name(enum preflight_kind k)
{
	switch (k) {
	case PREFLIGHT_OK:
		return "ok";
	case PREFLIGHT_PROBLEM:
		return "problem";
	case PREFLIGHT_WARNING:
		return "warning";
	case PREFLIGHT_SKIPPED:
		return "skipped";
	}
	return "?";
}

void preflight_finish(struct preflight *pf)
{
	for (size_t i = 0; i < pf->nitems; i++)
		free(pf->items[i].text);
	free(pf->items);
	*pf = (struct preflight){0};
}

/* ---- Redis ---- */

/*
 * Is this error reply one that no retry can fix (credentials, a database the
 * server lacks)? As the sink judges it (redis_conn.h); an ACL refusal is a
 * problem too, but the other checks still run.
 */
static bool redis_auth_error(const char *msg)
{
	return redis_conn_error_permanent(msg) && strncmp(msg, "NOPERM", 6) != 0;
}

/* Is the command known to the server? 1 yes, 0 no, -1 could not tell (problem added when fatal). */
static int redis_has(redisContext *c, struct preflight *pf, const char *where, const char *cmd,
                     bool *fatal)
{
	const char *argv[] = {"COMMAND", "INFO", cmd};
	redisReply *r = redisCommandArgv(c, 3, argv, NULL);
	size_t missing;
	char why[160];
	int ret;

	if (!r) {
		add(pf, PREFLIGHT_PROBLEM, "Redis at %s: COMMAND INFO failed: %s", where,
		    c->errstr[0] ? c->errstr : "connection lost");
		*fatal = true;
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR && redis_auth_error(r->str)) {
		add(pf, PREFLIGHT_PROBLEM, "Redis at %s: COMMAND INFO failed: %s (%s)", where, r->str,
		    redis_conn_error_hint(r->str));
		*fatal = true;
		freeReplyObject(r);
		return -1;
	}
	switch (cluster_slots_command_info(r, 1, &missing, why, sizeof(why))) {
	case CMDINFO_PRESENT:
		ret = 1;
		break;
	case CMDINFO_MISSING:
		ret = 0;
		break;
	default:
		ret = -1;
		break;
	}
	freeReplyObject(r);
	return ret;
}

static void redis_info(redisContext *c, const char *section, char *buf, size_t len)
{
	const char *argv[] = {"INFO", section};
	redisReply *r = redisCommandArgv(c, 2, argv, NULL);

	buf[0] = '\0';
	if (r && r->type == REDIS_REPLY_STRING)
		snprintf(buf, len, "%s", r->str);
	freeReplyObject(r);
}

static void check_redis_at(const struct relay_config *cf, const struct redis_target *t,
                           struct preflight *pf)
{
	static const char *const needed[] = {"XADD", "XGROUP", "EVALSHA", "WAITAOF"};
	bool want_aof = cf->wait_aof && strcmp(cf->wait_aof, "none") != 0;
	bool fatal = false, functions = false;
	char where[300], info[8192], v[64], v2[64], err[1024];
	const char *skip = "the other Redis checks (commands, role, eviction policy)";
	struct redis_conn rc;
	enum redis_conn_status st;
	redisContext *c;
	size_t nbad = pf->nproblems;

	redis_target_describe(t, where, sizeof(where));
	/* Connect, TLS, AUTH, SELECT as the relay does (redis_conn.h). */
	st = redis_conn_open(&rc, t, t->host, t->port, t->unix_path, cf->redis_timeout_ms, err,
	                     sizeof(err));
	if (st != REDIS_CONN_OK) {
		add(pf, PREFLIGHT_PROBLEM, "Redis at %s: %s%s", where, err,
		    st == REDIS_CONN_RETRY ? "; start Redis or fix --redis-url (the relay would keep "
		                             "retrying)"
		                           : "");
		add(pf, PREFLIGHT_SKIPPED, "%s need %s", skip,
		    strncmp(err, "AUTH", 4) == 0  ? "a successful AUTH"
		    : strncmp(err, "TLS", 3) == 0 ? "a TLS session"
		                                  : "a connection");
		return;
	}
	c = rc.c;
	for (size_t i = 0; i < (want_aof ? 4u : 3u) && !fatal; i++) {
		int has = redis_has(c, pf, where, needed[i], &fatal);

		if (has == 0 && i == 3)
			add(pf, PREFLIGHT_PROBLEM,
			    "Redis at %s: --wait-aof needs WAITAOF, which Redis 7.2 introduced; "
			    "upgrade Redis or drop --wait-aof",
			    where);
		else if (has == 0)
			add(pf, PREFLIGHT_PROBLEM,
			    "Redis at %s: the server does not provide %s: outbox-relay needs Redis 5 "
			    "or newer with streams and scripting (7.0+ recommended for functions)",
			    where, needed[i]);
	}
	if (!fatal && cf->redis_functions)
		functions = redis_has(c, pf, where, "FUNCTION", &fatal) == 1 && !fatal &&
		            redis_has(c, pf, where, "FCALL", &fatal) == 1;
	if (!fatal && !functions) {
		int has = redis_has(c, pf, where, "SCRIPT", &fatal);

		if (has == 0)
			add(pf, PREFLIGHT_PROBLEM,
			    "Redis at %s: the server does not provide SCRIPT, which the EVALSHA "
			    "fallback needs when Redis functions are %s: outbox-relay needs Redis 5 or "
			    "newer with streams and scripting (7.0+ recommended for functions)",
			    where, cf->redis_functions ? "unavailable" : "turned off");
		else if (has == 1)
			add(pf, PREFLIGHT_OK, "Redis at %s: %s: the relay uses SCRIPT LOAD + EVALSHA", where,
			    cf->redis_functions ? "no Redis functions (FUNCTION, FCALL)"
			                        : "--no-redis-functions");
	}
	if (fatal) {
		add(pf, PREFLIGHT_SKIPPED, "%s need a connection", skip);
		redisFree(c);
		return;
	}
	redis_info(c, "replication", info, sizeof(info));
	redis_info_field(info, "role:", v, sizeof(v));
	if (strcmp(v, "slave") == 0 && !t->cluster)
		add(pf, PREFLIGHT_PROBLEM,
		    "Redis at %s is a replica (role:slave): writes fail with READONLY; point "
		    "--redis-url at the master",
		    where);
	redis_info(c, "memory", info, sizeof(info));
	redis_info_field(info, "maxmemory:", v, sizeof(v));
	redis_info_field(info, "maxmemory_policy:", v2, sizeof(v2));
	if (strncmp(v2, "allkeys-", 8) == 0 && !cf->allow_eviction)
		add(pf, PREFLIGHT_PROBLEM,
		    "Redis at %s has maxmemory-policy %s: it may evict stream entries, watermarks "
		    "and dedup keys (events lost or published twice); set maxmemory-policy "
		    "noeviction, or pass --allow-eviction to run anyway",
		    where, v2);
	else if (v[0] && strcmp(v, "0") != 0 && v2[0] && strcmp(v2, "noeviction") != 0)
		add(pf, PREFLIGHT_WARNING,
		    "Redis at %s: maxmemory-policy is %s with maxmemory %s: Redis may evict stream "
		    "entries, dedup keys and the relay's watermarks; set maxmemory-policy noeviction",
		    where, v2, v);
	if (pf->nproblems == nbad)
		add(pf, PREFLIGHT_OK, "Redis at %s: reachable%s, %s and XADD available", where,
		    t->password ? ", AUTH accepted" : "", functions ? "functions (FCALL)" : "EVALSHA");
	redisFree(c);
}

/* Sentinel mode: find the master as the relay would, then check it. */
static void check_redis(const struct relay_config *cf, struct preflight *pf)
{
	const struct redis_target *t = &cf->redis;
	struct redis_target m;
	char where[300], err[1500], *host = NULL;
	int port = 0;
	bool permanent;

	if (!t->sentinel) {
		check_redis_at(cf, t, pf);
		return;
	}
	redis_target_describe(t, where, sizeof(where));
	if (!redis_sentinel_discover(t, cf->redis_timeout_ms, &host, &port, &permanent, err,
	                             sizeof(err))) {
		add(pf, PREFLIGHT_PROBLEM, "Redis at %s: %s", where, err);
		add(pf, PREFLIGHT_SKIPPED,
		    "the other Redis checks (commands, role, eviction policy) need a master");
		return;
	}
	add(pf, PREFLIGHT_OK, "Redis at %s: the Sentinels name %s:%d as the master", where, host, port);
	redis_sentinel_master_target(t, host, port, &m);
	check_redis_at(cf, &m, pf);
	free(host);
}

/* ---- PostgreSQL ---- */

/* The relay's connection parameters; replication is "database" or "false". */
static PGconn *pg_connect(const struct relay_config *cf, const char *replication)
{
	const char *keys[11] = {"connect_timeout",  "keepalives",
	                        "keepalives_idle",  "keepalives_interval",
	                        "keepalives_count", "fallback_application_name",
	                        "dbname",           "replication"};
	const char *vals[11] = {"10",       "1",        "30", "10", "3", "outbox-relay-check",
	                        cf->pg_dsn, replication};

	if (cf->pg_password) {
		keys[8] = "password";
		vals[8] = cf->pg_password;
	}
	return PQconnectdbParams(keys, vals, 1);
}

/* A failed query as the relay would report it. */
static void add_command_problem(struct preflight *pf, PGconn *c, const PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	char line[1024];

	(void)pgrepl_explain_command(PQerrorMessage(c), state ? state : "", line, sizeof(line));
	add(pf, PREFLIGHT_PROBLEM, "%s", line);
}

/*
 * Run the query built in q (then freed) on c. NULL when building it ran out
 * of memory (pf->oom set) or libpq had no memory for a result; a result of
 * any status otherwise, for the caller to PQclear.
 */
static PGresult *exec_query(struct preflight *pf, PGconn *c, struct buf *q)
{
	PGresult *res = NULL;

	if (!q->failed)
		res = PQexec(c, q->data);
	buf_finish(q);
	if (!res)
		pf->oom = true;
	return res;
}

/*
 * The outbox table and the columns the relay maps, read as the relay reads
 * them (pg_table_read()); its real schema and name into schema and name (left
 * "" when not found).
 */
static void check_table(const struct relay_config *cf, struct preflight *pf, PGconn *c,
                        char *schema, char *name, size_t len)
{
	struct stream_tmpl *t;
	struct pg_table tbl;
	PGresult *failed;
	enum pg_fact fact;
	char err[256], line[512];
	size_t nbad = pf->nproblems;

	fact = pg_table_read(c, cf->table, false, &tbl, &failed);
	if (fact != PG_FACT_OK) {
		if (pg_table_refusal(fact, cf->table, line, sizeof(line)))
			add(pf, PREFLIGHT_PROBLEM, "%s", line);
		else if (fact == PG_FACT_FAILED)
			add_command_problem(pf, c, failed);
		else
			pf->oom = true;
		PQclear(failed);
		pg_table_free(&tbl);
		return;
	}
	snprintf(schema, len, "%s", tbl.schema);
	snprintf(name, len, "%s", tbl.name);
	if (pg_table_column(&tbl, cf->id_column) < 0)
		add(pf, PREFLIGHT_PROBLEM,
		    "column \"%s\" (named by --id-column) does not exist in outbox table \"%s\": add the "
		    "column or fix --id-column",
		    cf->id_column, cf->table);
	t = stream_tmpl_compile(cf->stream, err, sizeof(err));
	for (size_t i = 0; t && i < stream_tmpl_ncolumns(t); i++) {
		const char *col = stream_tmpl_column(t, i);
		bool seen = false;

		for (size_t j = 0; j < i; j++) /* {a}:{a} names it once */
			seen = seen || strcmp(stream_tmpl_column(t, j), col) == 0;
		if (!seen && pg_table_column(&tbl, col) < 0)
			add(pf, PREFLIGHT_PROBLEM,
			    "column \"%s\" (named by --stream) does not exist in outbox table \"%s\": add "
			    "the column or fix --stream",
			    col, cf->table);
	}
	stream_tmpl_free(t);
	if (pf->nproblems == nbad)
		add(pf, PREFLIGHT_OK, "outbox table %s.%s has the id and routing columns", tbl.schema,
		    tbl.name);
	pg_table_free(&tbl);
}

/* What the catalogs say, read on a plain connection. */
struct pg_facts {
	bool ok;
	bool replication; /* rolreplication or rolsuper */
	char user[128];
	char db[128];
	char wal_level[32];
	int max_slots, used_slots;
	int max_senders, used_senders;
	bool has_opl; /* output_plugin_libraries exists */
	bool opl_wal2json, opl_pgoutput;
	char opl[256];
	bool slot_exists; /* a logical wal2json or pgoutput slot the relay would use */
	char plugin[16];  /* the plugin the relay would use: the slot's, else --plugin */
	char tbl_schema[128], tbl_name[128]; /* the outbox table as resolved ("" when missing) */
};

static void read_facts(struct preflight *pf, PGconn *c, struct pg_facts *f)
{
	PGresult *res = PQexec(
	    c, "SELECT current_user, r.rolreplication OR r.rolsuper, current_database(), "
	       "current_setting('wal_level'), current_setting('max_replication_slots')::int, "
	       "(SELECT count(*) FROM pg_catalog.pg_replication_slots)::int, "
	       "current_setting('max_wal_senders')::int, "
	       "(SELECT count(*) FROM pg_catalog.pg_stat_replication)::int, "
	       "(SELECT setting FROM pg_catalog.pg_settings WHERE name = 'output_plugin_libraries') "
	       "FROM pg_catalog.pg_roles r WHERE r.rolname = current_user");

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		add_command_problem(pf, c, res);
		PQclear(res);
		return;
	}
	snprintf(f->user, sizeof(f->user), "%s", PQgetvalue(res, 0, 0));
	f->replication = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	snprintf(f->db, sizeof(f->db), "%s", PQgetvalue(res, 0, 2));
	snprintf(f->wal_level, sizeof(f->wal_level), "%s", PQgetvalue(res, 0, 3));
	f->max_slots = atoi(PQgetvalue(res, 0, 4));
	f->used_slots = atoi(PQgetvalue(res, 0, 5));
	f->max_senders = atoi(PQgetvalue(res, 0, 6));
	f->used_senders = atoi(PQgetvalue(res, 0, 7));
	f->has_opl = !PQgetisnull(res, 0, 8);
	if (f->has_opl) {
		const char *s = PQgetvalue(res, 0, 8);

		snprintf(f->opl, sizeof(f->opl), "%s", s);
		/* A list of names: "pgoutput, test_decoding, wal2json", maybe quoted. */
		while (*s) {
			size_t n;

			s += strspn(s, " ,\"");
			n = strcspn(s, " ,\"");
			if (n == 8 && strncmp(s, "wal2json", 8) == 0)
				f->opl_wal2json = true;
			if (n == 8 && strncmp(s, "pgoutput", 8) == 0)
				f->opl_pgoutput = true;
			s += n;
		}
	}
	f->ok = true;
	PQclear(res);
}

/*
 * The slot as pgrepl.c's ensure_slot judges it: sets f->slot_exists (a slot
 * the relay would use) and f->plugin, the plugin the relay would use (an
 * existing slot's own, whatever --plugin says; else --plugin).
 */
static void check_slot(const struct relay_config *cf, struct preflight *pf, PGconn *c,
                       struct pg_facts *f)
{
	struct pg_slot slot;
	PGresult *failed;
	enum pg_fact fact;

	snprintf(f->plugin, sizeof(f->plugin), "%s", cf->plugin);
	fact = pg_slot_read(c, cf->slot, &slot, &failed);
	if (fact == PG_FACT_NOMEM) {
		pf->oom = true;
		return;
	}
	if (fact == PG_FACT_FAILED || fact == PG_FACT_BAD_NAME) {
		add_command_problem(pf, c, failed);
		PQclear(failed);
		return;
	}
	if (!slot.exists) {
		if (!cf->create_slot)
			add(pf, PREFLIGHT_PROBLEM,
			    "replication slot \"%s\" does not exist and --no-create-slot is set: create "
			    "it with SELECT pg_create_logical_replication_slot('%s', '%s') or drop "
			    "--no-create-slot",
			    cf->slot, cf->slot, cf->plugin);
		else if (f->max_slots > 0 && f->used_slots >= f->max_slots)
			add(pf, PREFLIGHT_PROBLEM,
			    "replication slot \"%s\" does not exist and all replication slots are in use "
			    "(%d of max_replication_slots = %d); drop an unused slot or raise "
			    "max_replication_slots",
			    cf->slot, f->used_slots, f->max_slots);
		else
			add(pf, PREFLIGHT_OK,
			    "replication slot \"%s\" does not exist: the relay will create it (%s)", cf->slot,
			    cf->plugin);
		return;
	}
	if (!slot.ours) {
		add(pf, PREFLIGHT_PROBLEM,
		    "replication slot \"%s\" exists but is a %s slot with plugin \"%s\"; outbox-relay "
		    "needs a logical wal2json or pgoutput slot: use another --slot or drop it with "
		    "SELECT pg_drop_replication_slot('%s')",
		    cf->slot, slot.type, slot.plugin[0] ? slot.plugin : "(none)", cf->slot);
		pg_slot_free(&slot);
		return;
	}
	/* The slot's own plugin decides, whatever --plugin says. */
	snprintf(f->plugin, sizeof(f->plugin), "%.15s", slot.plugin); /* wal2json or pgoutput */
	f->slot_exists = true;
	if (strcmp(slot.database, f->db) != 0)
		add(pf, PREFLIGHT_PROBLEM,
		    "replication slot \"%s\" belongs to database \"%s\", not \"%s\": fix dbname in "
		    "--pg-dsn or use another --slot",
		    cf->slot, slot.database, f->db);
	else if (slot.invalidated)
		add(pf, PREFLIGHT_PROBLEM,
		    "replication slot \"%s\" was invalidated (%s); the slot was "
		    "invalidated (max_slot_wal_keep_size exceeded): WAL it needed is gone, so events in "
		    "that range must be recovered from the outbox table; then drop the slot and let the "
		    "relay create a new one",
		    cf->slot, slot.why);
	else if (slot.active)
		add(pf, PREFLIGHT_WARNING,
		    "replication slot \"%s\" is active in another process (another relay?): this relay "
		    "would wait as its standby",
		    cf->slot);
	else
		add(pf, PREFLIGHT_OK,
		    "replication slot \"%s\" exists (%s, database %s, confirmed up to %s)", cf->slot,
		    slot.plugin, slot.database,
		    pg_slot_cell(&slot, PGS_CONFIRMED) ? pg_slot_cell(&slot, PGS_CONFIRMED) : "?");
	pg_slot_free(&slot);
}

/*
 * output_plugin_libraries (where the server has it) must allow the plugin
 * the relay would use; true when a problem was added.
 */
static bool check_opl(struct preflight *pf, const struct pg_facts *f)
{
	char line[1024], *alt;

	if (!f->has_opl)
		return false;
	if (strcmp(f->plugin, "pgoutput") == 0) {
		if (f->opl_pgoutput)
			return false;
		add(pf, PREFLIGHT_PROBLEM,
		    "library \"pgoutput\" may not be used as an output plugin; add pgoutput to "
		    "output_plugin_libraries in postgresql.conf, e.g. output_plugin_libraries = "
		    "'pgoutput, test_decoding, wal2json', then reload PostgreSQL "
		    "(output_plugin_libraries = '%s')",
		    f->opl);
		return true;
	}
	if (f->opl_wal2json)
		return false;
	(void)pgrepl_explain_command("library \"wal2json\" may not be used as an output plugin", "",
	                             line, sizeof(line));
	/* The relay's hint offers --plugin pgoutput: only where pgoutput is allowed. */
	alt = strstr(line, "; or stream with --plugin pgoutput");
	if (alt && !f->opl_pgoutput)
		*alt = '\0';
	add(pf, PREFLIGHT_PROBLEM, "%s (output_plugin_libraries = '%s')", line, f->opl);
	return true;
}

/*
 * pgoutput: the publication as pgrepl.c's ensure_publication judges it. It
 * must publish every insert of the outbox table, whole. When it is missing
 * the relay creates it before a new slot (if the role may: it must own the
 * table, or be a superuser, and have CREATE on the database), but refuses an
 * existing slot whose publication is missing. Nothing is created here.
 */
static void check_publication(const struct relay_config *cf, struct preflight *pf, PGconn *c,
                              const struct pg_facts *f)
{
	const char *pub = cf->publication ? cf->publication : cf->slot;
	struct buf q = {0}, tbl = {0}, create = {0};
	PGresult *res;
	bool v15 = PQserverVersion(c) >= 150000;

	if (!f->tbl_name[0]) {
		add(pf, PREFLIGHT_SKIPPED, "the publication check (pgoutput) needs the outbox table");
		return;
	}
	buf_put_sql_ident(&tbl, f->tbl_schema);
	buf_putc(&tbl, '.');
	buf_put_sql_ident(&tbl, f->tbl_name);
	buf_puts(&create, "CREATE PUBLICATION ");
	buf_put_sql_ident(&create, pub);
	buf_puts(&create, " FOR TABLE ");
	buf_puts(&create, tbl.data ? tbl.data : "");
	buf_puts(&create, " WITH (publish = 'insert')");
	if (tbl.failed || create.failed) {
		pf->oom = true;
		goto out;
	}
	/* The relay's own query and judgement (pgrepl.h). */
	pgrepl_publication_query(&q, pub, f->tbl_schema, f->tbl_name, tbl.data, v15);
	res = exec_query(pf, c, &q);
	if (!res)
		goto out;
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		add_command_problem(pf, c, res);
		PQclear(res);
		goto out;
	}
	if (PQntuples(res) == 0 && f->slot_exists) {
		char line[1024];

		pgrepl_publication_missing_for_slot(line, sizeof(line), pub, cf->slot, tbl.data);
		add(pf, PREFLIGHT_PROBLEM, "%s", line);
	} else if (PQntuples(res) == 0 && !cf->create_slot) {
		add(pf, PREFLIGHT_PROBLEM,
		    "publication \"%s\" does not exist: run %s before creating the slot (a slot made "
		    "before its publication cannot decode what it holds from before it)",
		    pub, create.data);
	} else if (PQntuples(res) == 0) {
		PGresult *may;

		/* CREATE PUBLICATION ... FOR TABLE: the table's owner (or a superuser) with CREATE
		 * on the database. */
		buf_puts(&q, "SELECT r.rolsuper OR (pg_catalog.pg_has_role(c.relowner, 'USAGE') AND "
		             "pg_catalog.has_database_privilege(current_database(), 'CREATE')) FROM "
		             "pg_catalog.pg_roles r, pg_catalog.pg_class c WHERE r.rolname = current_user "
		             "AND c.oid = ");
		buf_put_sql_literal(&q, tbl.data);
		buf_puts(&q, "::regclass");
		may = exec_query(pf, c, &q);
		if (may && PQresultStatus(may) != PGRES_TUPLES_OK)
			add_command_problem(pf, c, may);
		else if (may && PQntuples(may) == 1 && strcmp(PQgetvalue(may, 0, 0), "t") == 0)
			add(pf, PREFLIGHT_OK,
			    "publication \"%s\" does not exist: the relay will create it (%s) before the "
			    "slot",
			    pub, create.data);
		else if (may)
			add(pf, PREFLIGHT_PROBLEM,
			    "publication \"%s\" does not exist and user %s may not create it (it must own "
			    "%s, or be a superuser, and have CREATE on database %s): run %s; as the table's "
			    "owner, or point --publication at one that publishes the table's inserts",
			    pub, f->user, tbl.data, f->db, create.data);
		PQclear(may);
	} else {
		const char *cells[4] = {PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2),
		                        PQgetvalue(res, 0, 3)};
		char line[1024];

		if (!pgrepl_publication_whole(cells, pub, tbl.data, line, sizeof(line)))
			add(pf, PREFLIGHT_PROBLEM, "%s", line);
		else
			add(pf, PREFLIGHT_OK, "publication \"%s\" publishes the inserts of the outbox table %s",
			    pub, tbl.data);
	}
	PQclear(res);
out:
	buf_finish(&tbl);
	buf_finish(&create);
}

/* Run a replication command, bounded by timeout_ms; NULL on timeout (cancelled). */
static PGresult *exec_bounded(PGconn *c, const char *sql, int timeout_ms, bool *timed_out)
{
	struct timeval start, now;
	PGresult *res, *last = NULL;

	*timed_out = false;
	if (!PQsendQuery(c, sql))
		return NULL;
	gettimeofday(&start, NULL);
	for (;;) {
		struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
		long left;

		if (!PQconsumeInput(c))
			break;
		if (!PQisBusy(c))
			break;
		gettimeofday(&now, NULL);
		left = timeout_ms -
		       ((now.tv_sec - start.tv_sec) * 1000L + (now.tv_usec - start.tv_usec) / 1000L);
		if (left <= 0) {
			PGcancel *cancel = PQgetCancel(c);
			char errbuf[256];

			if (cancel) {
				(void)PQcancel(cancel, errbuf, sizeof(errbuf));
				PQfreeCancel(cancel);
			}
			*timed_out = true;
			break;
		}
		if (poll(&pfd, 1, (int)left) < 0)
			break;
	}
	while ((res = PQgetResult(c)) != NULL) {
		PQclear(last);
		last = res;
	}
	if (*timed_out) {
		PQclear(last);
		return NULL;
	}
	return last;
}

/*
 * On the replication connection: IDENTIFY_SYSTEM, then a TEMPORARY slot with
 * plugin (wal2json or pgoutput), dropped at once: proves the plugin is
 * installed and allowed.
 */
static void check_plugin(struct preflight *pf, PGconn *c, const char *plugin, bool opl_reported)
{
	char name[64], sql[160];
	PGresult *res;
	bool timed_out;

	res = PQexec(c, "IDENTIFY_SYSTEM");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		add_command_problem(pf, c, res);
		PQclear(res);
		return;
	}
	if (PQntuples(res) != 1 || PQnfields(res) < 4 || PQgetisnull(res, 0, 3))
		add(pf, PREFLIGHT_PROBLEM,
		    "IDENTIFY_SYSTEM returned no database: the connection must "
		    "use replication=database and a dbname");
	PQclear(res);
	snprintf(name, sizeof(name), "outbox_relay_check_%ld", (long)getpid());
	snprintf(sql, sizeof(sql),
	         "CREATE_REPLICATION_SLOT \"%s\" TEMPORARY LOGICAL %s (SNAPSHOT 'nothing')", name,
	         plugin);
	res = exec_bounded(c, sql, SLOT_CHECK_TIMEOUT_MS, &timed_out);
	if (timed_out) {
		add(pf, PREFLIGHT_SKIPPED,
		    "the %s check: its temporary slot waited %d s for running transactions to end", plugin,
		    SLOT_CHECK_TIMEOUT_MS / 1000);
		return;
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		char line[1024];
		const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

		(void)pgrepl_explain_command(PQerrorMessage(c), state ? state : "", line, sizeof(line));
		/* Already said from the catalogs: not a second line. */
		if (!(opl_reported && strstr(line, "may not be used as an output plugin")))
			add(pf, PREFLIGHT_PROBLEM, "%s", line);
		PQclear(res);
		return;
	}
	PQclear(res);
	/* Dropped now, not at session end: nothing may be left once we return. */
	snprintf(sql, sizeof(sql), "DROP_REPLICATION_SLOT \"%s\"", name);
	res = PQexec(c, sql);
	PQclear(res);
	add(pf, PREFLIGHT_OK, "%s loads as an output plugin (a temporary slot was created and dropped)",
	    plugin);
}

static void check_pg(const struct relay_config *cf, struct preflight *pf)
{
	struct pg_facts f = {0};
	PGconn *c, *rc;
	char line[1024];
	size_t nbad = pf->nproblems;
	bool opl_reported = false, room_senders, room_slots;

	c = pg_connect(cf, "false");
	if (!c) {
		add(pf, PREFLIGHT_PROBLEM, "out of memory allocating a PostgreSQL connection");
		return;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		if (pgrepl_explain_connect(PQerrorMessage(c), line, sizeof(line)) == PG_RETRY)
			add(pf, PREFLIGHT_PROBLEM,
			    "%s; start PostgreSQL or fix the host and port in --pg-dsn (the relay would "
			    "keep retrying)",
			    line);
		else
			add(pf, PREFLIGHT_PROBLEM, "%s", line);
		add(pf, PREFLIGHT_SKIPPED,
		    "the other PostgreSQL checks (REPLICATION, wal_level, slots, output plugin, "
		    "publication, outbox table) need a connection");
		PQfinish(c);
		return;
	}
	read_facts(pf, c, &f);
	if (!f.ok) {
		PQfinish(c);
		return;
	}
	if (strcmp(f.wal_level, "logical") != 0)
		add(pf, PREFLIGHT_PROBLEM,
		    "logical decoding requires wal_level >= logical (it is %s); set wal_level = logical "
		    "in postgresql.conf and restart PostgreSQL",
		    f.wal_level);
	room_senders = f.used_senders < f.max_senders;
	if (!room_senders)
		add(pf, PREFLIGHT_PROBLEM,
		    "no free WAL sender: %d of max_wal_senders = %d in use; raise max_wal_senders in "
		    "postgresql.conf and restart PostgreSQL",
		    f.used_senders, f.max_senders);
	check_table(cf, pf, c, f.tbl_schema, f.tbl_name, sizeof(f.tbl_name));
	check_slot(cf, pf, c, &f); /* decides f.plugin */
	opl_reported = check_opl(pf, &f);
	if (strcmp(f.plugin, "pgoutput") == 0)
		check_publication(cf, pf, c, &f);
	PQfinish(c);
	room_slots = f.used_slots < f.max_slots;

	/* The replication connection, as the relay opens it. */
	if (!room_senders) {
		if (!f.replication) {
			(void)pgrepl_explain_connect("must be superuser or replication role to start "
			                             "walsender",
			                             line, sizeof(line));
			add(pf, PREFLIGHT_PROBLEM, "%s", line);
		}
		add(pf, PREFLIGHT_SKIPPED,
		    "the %s check needs a replication connection (no free WAL sender)", f.plugin);
		goto done;
	}
	rc = pg_connect(cf, "database");
	if (!rc || PQstatus(rc) != CONNECTION_OK) {
		(void)pgrepl_explain_connect(rc ? PQerrorMessage(rc) : "out of memory", line, sizeof(line));
		add(pf, PREFLIGHT_PROBLEM, "%s", line);
		add(pf, PREFLIGHT_SKIPPED, "the %s check needs a replication connection", f.plugin);
		PQfinish(rc);
		goto done;
	}
	if (strcmp(f.wal_level, "logical") != 0)
		add(pf, PREFLIGHT_SKIPPED, "the %s check needs wal_level = logical", f.plugin);
	else if (!room_slots)
		add(pf, PREFLIGHT_SKIPPED,
		    "the %s check needs a free replication slot for a temporary slot", f.plugin);
	else
		check_plugin(pf, rc, f.plugin, opl_reported);
	PQfinish(rc);
done:
	if (pf->nproblems == nbad)
		add(pf, PREFLIGHT_OK,
		    "PostgreSQL: user %s with REPLICATION, database %s, wal_level logical, %d of %d "
		    "slots and %d of %d WAL senders in use",
		    f.user, f.db, f.used_slots, f.max_slots, f.used_senders, f.max_senders);
}

void preflight_run(const struct relay_config *cf, struct preflight *pf)
{
	/* The relay's own order: Redis first, then PostgreSQL. */
	check_redis(cf, pf);
	check_pg(cf, pf);
}
