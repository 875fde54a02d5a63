/*
 * pgrepl.c - logical replication over libpq (replication=database).
 *
 * Connection and setup commands are synchronous; streaming uses
 * PQgetCopyData in async mode so the relay's poll loop can serve Redis at
 * the same time. Byte layouts follow the PostgreSQL streaming replication
 * protocol (all integers big-endian).
 */
#include "pgrepl.h"

#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "event.h"
#include "log.h"
#include "pg_facts.h"
#include "slot_record.h"

struct pgrepl {
	const struct relay_config *cf;
	PGconn *conn;
	bool streaming;
	bool created_slot;
	bool altered_failover; /* the last start switched FAILOVER on */
	lsn_t slot_confirmed;  /* the slot's confirmed_flush_lsn when streaming started */
	char system_id[PGREPL_SYSTEM_ID_LEN]; /* IDENTIFY_SYSTEM's systemid */
	char dbname[PGREPL_DBNAME_LEN];       /* and dbname */
	lsn_t xlogpos;                        /* and xlogpos: the server's WAL end then */
	struct slot_history hist;             /* and its timeline and history (slot_record.h) */
	bool diverged;           /* the last check found the history does not hold the guard's */
	char *tbl_schema;        /* the outbox table's real schema and name, as */
	char *tbl_name;          /* PostgreSQL resolved --table (case folded, quotes gone) */
	struct pg_table cols;    /* its columns, as the last check_table read them */
	bool warned_generated;   /* the warning that pgoutput leaves them out was logged */
	struct slot_guard guard; /* pgrepl_set_guard; guard.owner is copied to guard_owner */
	char guard_owner[160];
	char gap[256];     /* the gap the last start accepted ("" none) */
	char plugin[16];   /* the slot's output plugin: wal2json or pgoutput */
	bool stream_fatal; /* the stream ended for a reason no reconnect fixes */
	struct {           /* the slot as the last start found it */
		bool known, exists, invalidated, failover;
		lsn_t confirmed;
		char invalid_why[64];
	} facts;
	char notice[512]; /* the newest server notice, one line ("" none) */
	bool notice_new;  /* not yet taken by pgrepl_take_notice */
	char *copybuf;    /* last PQgetCopyData buffer, freed on the next call */
	char errmsg[1024];
};

struct pgrepl *pgrepl_create(const struct relay_config *cf)
{
	struct pgrepl *p = calloc(1, sizeof(*p));

	if (p)
		p->cf = cf;
	return p;
}

void pgrepl_close(struct pgrepl *p)
{
	if (p->copybuf) {
		PQfreemem(p->copybuf);
		p->copybuf = NULL;
	}
	if (p->conn) {
		PQfinish(p->conn);
		p->conn = NULL;
	}
	p->streaming = false;
}

void pgrepl_destroy(struct pgrepl *p)
{
	if (!p)
		return;
	pgrepl_close(p);
	free(p->tbl_schema);
	free(p->tbl_name);
	pg_table_free(&p->cols);
	free(p);
}

const char *pgrepl_errmsg(const struct pgrepl *p)
{
	return p->errmsg;
}

bool pgrepl_streaming(const struct pgrepl *p)
{
	return p->streaming;
}

int pgrepl_server_version(const struct pgrepl *p)
{
	return p->conn ? PQserverVersion(p->conn) : 0;
}

bool pgrepl_altered_failover(const struct pgrepl *p)
{
	return p->altered_failover;
}

bool pgrepl_created_slot(const struct pgrepl *p)
{
	return p->created_slot;
}

lsn_t pgrepl_start_wal_end(const struct pgrepl *p)
{
	return p->xlogpos;
}

const char *pgrepl_system_id(const struct pgrepl *p)
{
	return p->system_id;
}

void pgrepl_set_guard(struct pgrepl *p, const struct slot_guard *g)
{
	p->guard = *g;
	snprintf(p->guard_owner, sizeof(p->guard_owner), "%s", g->owner ? g->owner : "");
	p->guard.owner = p->guard_owner;
}

const char *pgrepl_gap_accepted(const struct pgrepl *p)
{
	return p->gap;
}

const char *pgrepl_plugin(const struct pgrepl *p)
{
	return p->plugin[0] ? p->plugin : p->cf->plugin;
}

bool pgrepl_stream_fatal(const struct pgrepl *p)
{
	return p->stream_fatal;
}

const char *pgrepl_publication(const struct pgrepl *p)
{
	return p->cf->publication ? p->cf->publication : p->cf->slot;
}

const char *pgrepl_table_schema(const struct pgrepl *p)
{
	return p->tbl_schema;
}

const char *pgrepl_table_name(const struct pgrepl *p)
{
	return p->tbl_name;
}

const struct pg_table *pgrepl_table_columns(const struct pgrepl *p)
{
	return &p->cols;
}

const char *pgrepl_dbname(const struct pgrepl *p)
{
	return p->dbname;
}

lsn_t pgrepl_slot_confirmed(const struct pgrepl *p)
{
	return p->slot_confirmed;
}

int pgrepl_fd(const struct pgrepl *p)
{
	return p->conn ? PQsocket(p->conn) : -1;
}

/* Copy libpq's (possibly multi-line) message as one line. */
static void set_err(struct pgrepl *p, const char *prefix, const char *msg)
{
	size_t n;

	/* libpq prefixes server messages with their severity; ours say it already. */
	if (msg && (strncmp(msg, "ERROR:  ", 8) == 0 || strncmp(msg, "FATAL:  ", 8) == 0))
		msg += 8;
	snprintf(p->errmsg, sizeof(p->errmsg), "%s%s", prefix, msg ? msg : "");
	/* Keep the first line: our own hint replaces the server's DETAIL/HINT lines. */
	{
		char *nl = strstr(p->errmsg, "\nHINT:");
		char *dl = strstr(p->errmsg, "\nDETAIL:");

		if (nl)
			*nl = '\0';
		if (dl)
			*dl = '\0';
	}
	n = strlen(p->errmsg);
	while (n > 0 && (p->errmsg[n - 1] == '\n' || p->errmsg[n - 1] == ' '))
		p->errmsg[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (p->errmsg[i] == '\n' || p->errmsg[i] == '\t')
			p->errmsg[i] = ' ';
}

static void append_hint(struct pgrepl *p, const char *hint)
{
	size_t n = strlen(p->errmsg);

	snprintf(p->errmsg + n, sizeof(p->errmsg) - n, "; %s", hint);
}

/* Classify a failed connection attempt from libpq's message text (no SQLSTATE is exposed). */
static enum pg_status classify_connect_error(struct pgrepl *p, const char *msg)
{
	/* libpq parses option values only when connecting: "invalid integer value
	 * ... for connection option", "invalid sslmode value", "invalid port number". */
	if (strncmp(msg, "invalid ", 8) == 0 ||
	    (strstr(msg, "invalid ") && strstr(msg, "connection option"))) {
		append_hint(p, "fix that value in --pg-dsn");
		return PG_FATAL_USAGE;
	}
	if (strstr(msg, "password authentication failed") || strstr(msg, "no pg_hba.conf entry") ||
	    strstr(msg, "authentication failed") || strstr(msg, "no password supplied")) {
		append_hint(p, "check the user and password in --pg-dsn and pg_hba.conf");
		return PG_FATAL_SETUP;
	}
	if (strstr(msg, "must be superuser or replication role") ||
	    strstr(msg, "permission denied to start WAL sender")) {
		append_hint(p, "grant it with: ALTER ROLE <user> REPLICATION");
		return PG_FATAL_SETUP;
	}
	if ((strstr(msg, "role \"") || strstr(msg, "database \"")) && strstr(msg, "does not exist")) {
		append_hint(p, "fix the user or dbname in --pg-dsn");
		return PG_FATAL_SETUP;
	}
	return PG_RETRY;
}

static const char *sqlstate(const PGresult *res)
{
	const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return s ? s : "";
}

/* Classify a failed replication/SQL command by SQLSTATE and message. */
static enum pg_status classify_command_state(struct pgrepl *p, const char *state);

static enum pg_status classify_command_error(struct pgrepl *p, const PGresult *res)
{
	return classify_command_state(p, sqlstate(res));
}

static enum pg_status classify_command_state(struct pgrepl *p, const char *state)
{

	if (strstr(p->errmsg, "may not be used as an output plugin")) {
		append_hint(p, "add wal2json to output_plugin_libraries in postgresql.conf, e.g. "
		               "output_plugin_libraries = 'pgoutput, test_decoding, wal2json', then "
		               "reload PostgreSQL; or stream with --plugin pgoutput (built in, allowed "
		               "everywhere) on a new --slot");
		return PG_FATAL_SETUP;
	}
	if (strcmp(state, "55006") == 0) /* object_in_use: slot active elsewhere */
		return PG_STANDBY;
	if (strstr(p->errmsg, "can no longer get changes") || strstr(p->errmsg, "invalidated")) {
		append_hint(p, "the slot was invalidated (max_slot_wal_keep_size exceeded): WAL it "
		               "needed is gone, so events in that range must be recovered from the "
		               "outbox table; then drop the slot and let the relay create a new one");
		return PG_FATAL_SLOT;
	}
	if (strcmp(state, "58P01") == 0 || strstr(p->errmsg, "could not access file")) {
		append_hint(p, "install the wal2json output plugin (Debian: postgresql-15-wal2json), or "
		               "stream with --plugin pgoutput (built in) on a new --slot");
		return PG_FATAL_SETUP;
	}
	if (strstr(p->errmsg, "wal_level")) {
		append_hint(p, "set wal_level = logical in postgresql.conf and restart PostgreSQL");
		return PG_FATAL_SETUP;
	}
	if (strcmp(state, "53400") == 0) { /* configuration_limit_exceeded */
		append_hint(p, "drop an unused slot or raise max_replication_slots");
		return PG_FATAL_SLOT;
	}
	if (strcmp(state, "42501") == 0) { /* insufficient_privilege */
		append_hint(p, "the role needs the REPLICATION attribute");
		return PG_FATAL_SETUP;
	}
	if (strcmp(state, "57P01") == 0 || strcmp(state, "57P02") == 0 || strcmp(state, "57P03") == 0 ||
	    state[0] == '0' || state[0] == '\0')
		return PG_RETRY; /* shutdown, crash, not yet accepting, connection trouble */
	return PG_RETRY;
}

/* The relay's one line and verdict for a failed connect (state NULL) or command. */
static enum pg_status explain(const char *msg, const char *state, char *out, size_t outlen)
{
	struct pgrepl *p = calloc(1, sizeof(*p));
	enum pg_status st;

	if (!p) {
		snprintf(out, outlen, "out of memory");
		return PG_RETRY;
	}
	set_err(p, state ? "" : "could not connect to PostgreSQL: ", msg ? msg : "");
	st = state ? classify_command_state(p, state) : classify_connect_error(p, msg ? msg : "");
	snprintf(out, outlen, "%s", p->errmsg);
	free(p);
	return st;
}

enum pg_status pgrepl_explain_connect(const char *msg, char *out, size_t outlen)
{
	return explain(msg, NULL, out, outlen);
}

enum pg_status pgrepl_explain_command(const char *msg, const char *state, char *out, size_t outlen)
{
	return explain(msg, state ? state : "", out, outlen);
}

static PGresult *run(struct pgrepl *p, const char *sql, ExecStatusType want, enum pg_status *st)
{
	PGresult *res = PQexec(p->conn, sql);

	if (PQresultStatus(res) == want)
		return res;
	set_err(p, "", PQerrorMessage(p->conn));
	*st = classify_command_error(p, res);
	PQclear(res);
	return NULL;
}

/* A read of pg_facts.c that did not give its answer: the status and p->errmsg. */
static enum pg_status fact_failed(struct pgrepl *p, enum pg_fact fact, PGresult *failed)
{
	enum pg_status st = PG_RETRY;

	if (fact == PG_FACT_FAILED) {
		set_err(p, "", PQerrorMessage(p->conn));
		st = classify_command_error(p, failed);
		PQclear(failed);
	} else {
		set_err(p, "", fact == PG_FACT_NOMEM ? "out of memory" : PQerrorMessage(p->conn));
	}
	return st;
}

/*
 * Server notices (WARNING, NOTICE) would go to stderr as libpq prints them,
 * several lines each; keep the newest as one line for the caller to log.
 */
static void keep_notice(void *arg, const char *msg)
{
	struct pgrepl *p = arg;
	char line[sizeof(p->notice)];
	size_t n = 0;

	for (; *msg && n + 1 < sizeof(line); msg++) {
		char c = *msg == '\n' || *msg == '\r' || *msg == '\t' ? ' ' : *msg;

		if (c == ' ' && (n == 0 || line[n - 1] == ' '))
			continue;
		line[n++] = c;
	}
	while (n > 0 && line[n - 1] == ' ')
		n--;
	line[n] = '\0';
	if (strcmp(line, p->notice) != 0 || !p->notice_new) {
		memcpy(p->notice, line, n + 1);
		p->notice_new = true;
	}
}

const char *pgrepl_take_notice(struct pgrepl *p)
{
	if (!p->notice_new)
		return NULL;
	p->notice_new = false;
	return p->notice;
}

static bool connect_db(struct pgrepl *p, enum pg_status *st)
{
	/* Defaults first; the expanded DSN overrides them; then what we force. */
	const char *keys[11] = {"connect_timeout",  "keepalives",
	                        "keepalives_idle",  "keepalives_interval",
	                        "keepalives_count", "fallback_application_name",
	                        "dbname",           "replication"};
	const char *vals[11] = {"10", "1", "30", "10", "3", "outbox-relay", p->cf->pg_dsn, "database"};

	if (p->cf->pg_password) { /* --pg-password-file wins over the DSN */
		keys[8] = "password";
		vals[8] = p->cf->pg_password;
	}
	p->conn = PQconnectdbParams(keys, vals, 1);
	if (p->conn)
		PQsetNoticeProcessor(p->conn, keep_notice, p);
	if (!p->conn) {
		set_err(p, "", "out of memory allocating a PostgreSQL connection");
		*st = PG_RETRY;
		return false;
	}
	if (PQstatus(p->conn) != CONNECTION_OK) {
		set_err(p, "could not connect to PostgreSQL: ", PQerrorMessage(p->conn));
		*st = classify_connect_error(p, PQerrorMessage(p->conn));
		return false;
	}
	return true;
}

/* wal2json's add-tables entry for schema.name: escape space ' , . * with a backslash. */
static void put_table_filter(struct buf *b, const char *schema, const char *name)
{
	for (int part = 0; part < 2; part++) {
		for (const char *s = part ? name : schema; *s; s++) {
			if (strchr(" ',.*\\", *s))
				buf_putc(b, '\\');
			buf_putc(b, *s);
		}
		if (!part)
			buf_putc(b, '.');
	}
}

/*
 * Is the slot, as the last start found it (p->facts), the one this relay
 * streamed before, as far as the slot record (p->guard) tells? NULL when it
 * is, or when there is no record; otherwise what is wrong with it, into why.
 */
static const char *slot_gap(const struct pgrepl *p, char *why, size_t whylen)
{
	struct slot_record rec = {.confirmed = p->guard.confirmed};
	struct slot_seen seen = {p->facts.exists, p->facts.invalidated, p->facts.invalid_why,
	                         p->facts.confirmed, p->created_slot};
	enum slot_verdict v;

	if (!p->guard.active || !p->facts.known)
		return NULL;
	v = slot_record_judge(&rec, &seen);
	return v == SLOT_SAME ? NULL : slot_record_why(v, &rec, &seen, why, whylen);
}

bool pgrepl_diverged(const struct pgrepl *p)
{
	return p->diverged;
}

void pgrepl_guard_published(struct pgrepl *p, lsn_t pos)
{
	if (pos > p->guard.published)
		p->guard.published = pos;
}

uint32_t pgrepl_timeline(const struct pgrepl *p)
{
	return p->hist.tli;
}

bool pgrepl_identity(const PGresult *res, char *system_id, char *dbname, struct slot_history *h)
{
	*h = (struct slot_history){0};
	if (PQntuples(res) != 1 || PQnfields(res) < 4 || PQgetisnull(res, 0, 3))
		return false;
	snprintf(system_id, PGREPL_SYSTEM_ID_LEN, "%s", PQgetvalue(res, 0, 0));
	snprintf(dbname, PGREPL_DBNAME_LEN, "%s", PQgetvalue(res, 0, 3));
	if (!PQgetisnull(res, 0, 1))
		h->tli = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
	if (PQgetisnull(res, 0, 2) ||
	    !lsn_parse(PQgetvalue(res, 0, 2), strlen(PQgetvalue(res, 0, 2)), &h->wal_end))
		h->wal_end = 0;
	return true;
}

bool pgrepl_read_history(PGconn *conn, uint32_t tli, struct slot_history *h, char *err,
                         size_t errlen)
{
	char q[48];
	PGresult *res;
	bool ok;

	h->n = 0;
	h->listed = false;
	if (tli <= 1) {
		h->listed = true; /* the first timeline has no history */
		return true;
	}
	snprintf(q, sizeof(q), "TIMELINE_HISTORY %u", (unsigned)tli);
	res = PQexec(conn, q);
	if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
	    PQnfields(res) < 2 || PQgetisnull(res, 0, 1)) {
		snprintf(err, errlen, "%s: %s", q,
		         res && PQresultStatus(res) == PGRES_FATAL_ERROR ? PQresultErrorMessage(res)
		                                                         : "unexpected answer");
		err[strcspn(err, "\n")] = '\0';
		PQclear(res);
		return false;
	}
	ok = slot_history_parse(PQgetvalue(res, 0, 1), (size_t)PQgetlength(res, 0, 1), h);
	if (!ok)
		snprintf(err, errlen, "%s: a line of timeline %u's history file is not one", q,
		         (unsigned)tli);
	PQclear(res);
	return ok;
}

/*
 * Does the server's history (the last start's) hold what Redis has, as far
 * as the guard tells? NULL when it does, or when there is no record.
 */
static const char *history_gap(const struct pgrepl *p, char *why, size_t whylen)
{
	struct slot_record rec = {
	    .confirmed = p->guard.confirmed, .commit_lsn = p->guard.commit_lsn, .tli = p->guard.tli};

	if (!p->guard.active || !p->hist.tli)
		return NULL;
	return slot_history_diverged(&rec, p->guard.published, &p->hist, why, whylen);
}

/* The slot record must be this database's (IDENTIFY_SYSTEM of the last start). */
static enum pg_status check_owner(struct pgrepl *p)
{
	struct slot_record rec = {0};

	if (!p->guard.active || !p->guard_owner[0] || !p->system_id[0])
		return PG_OK;
	snprintf(rec.owner, sizeof(rec.owner), "%s", p->guard_owner);
	if (slot_record_owner_is(&rec, p->system_id, p->dbname))
		return PG_OK;
	snprintf(p->errmsg, sizeof(p->errmsg),
	         "Redis holds the record of a slot \"%s\" that belongs to database %s, not to "
	         "this one (%s/%s)",
	         p->cf->slot, p->guard_owner, p->system_id, p->dbname);
	return PG_FATAL_FOREIGN;
}

enum pg_status pgrepl_recheck(struct pgrepl *p)
{
	char why[400], a[LSN_STRLEN];
	const char *gap;
	enum pg_status st = check_owner(p);

	if (st != PG_OK)
		return st;
	p->diverged = false;
	gap = history_gap(p, why, sizeof(why));
	if (gap) { /* never accepted: the watermarks must come down first (heal) */
		p->gap[0] = '\0';
		p->diverged = true;
		snprintf(p->errmsg, sizeof(p->errmsg), "PostgreSQL %s", gap);
		return PG_FATAL_GAP;
	}
	gap = slot_gap(p, why, sizeof(why));
	p->gap[0] = '\0';
	if (!gap)
		return PG_OK;
	if (!slot_record_accepts(&(struct slot_record){.confirmed = p->guard.confirmed},
	                         p->guard.accept)) {
		snprintf(p->errmsg, sizeof(p->errmsg), "replication slot \"%s\" %s", p->cf->slot, gap);
		return PG_FATAL_GAP;
	}
	snprintf(p->gap, sizeof(p->gap), "replication slot \"%s\" %s; --accept-gap %s", p->cf->slot,
	         gap, lsn_format(p->guard.accept, a));
	return PG_OK;
}

static enum pg_status ensure_publication(struct pgrepl *p, bool slot_exists);

static enum pg_status ensure_slot(struct pgrepl *p)
{
	enum pg_status st = PG_RETRY;
	struct buf q = {0};
	struct pg_slot slot;
	PGresult *res, *failed;
	enum pg_fact fact;
	bool exists;

	p->gap[0] = '\0';
	p->plugin[0] = '\0';
	p->facts.known = false;
	p->altered_failover = false;
	fact = pg_slot_read(p->conn, p->cf->slot, &slot, &failed);
	if (fact != PG_FACT_OK && fact != PG_FACT_ABSENT)
		return fact_failed(p, fact, failed);
	exists = slot.exists;
	if (exists) {
		if (!slot.ours) {
			snprintf(p->errmsg, sizeof(p->errmsg),
			         "replication slot \"%s\" exists but is a %s slot with plugin \"%s\"; "
			         "outbox-relay needs a logical wal2json or pgoutput slot: use another --slot "
			         "or drop it with SELECT pg_drop_replication_slot('%s')",
			         p->cf->slot, slot.type, slot.plugin[0] ? slot.plugin : "(none)", p->cf->slot);
			pg_slot_free(&slot);
			return PG_FATAL_SLOT;
		}
		/* The slot's own plugin decides, whatever --plugin says. */
		snprintf(p->plugin, sizeof(p->plugin), "%.15s", slot.plugin); /* wal2json or pgoutput */
		if (strcmp(slot.database, PQdb(p->conn)) != 0) {
			snprintf(p->errmsg, sizeof(p->errmsg),
			         "replication slot \"%s\" belongs to database \"%s\", not \"%s\": "
			         "fix dbname in --pg-dsn or use another --slot",
			         p->cf->slot, slot.database, PQdb(p->conn));
			pg_slot_free(&slot);
			return PG_FATAL_SLOT;
		}
		p->slot_confirmed = slot.confirmed;
		p->facts.confirmed = slot.confirmed;
		snprintf(p->facts.invalid_why, sizeof(p->facts.invalid_why), "%s", slot.why);
		p->facts.invalidated = slot.invalidated;
		p->facts.failover = slot.failover;
	}
	pg_slot_free(&slot);
	p->facts.known = true;
	p->facts.exists = exists;
	p->created_slot = false;
	st = pgrepl_recheck(p);
	if (st != PG_OK)
		return st;
	if (p->gap[0]) { /* the user accepted this gap: go on from what the slot offers */
		if (p->facts.invalidated) { /* it can never stream again: replace it */
			buf_puts(&q, "DROP_REPLICATION_SLOT \"");
			buf_puts(&q, p->cf->slot);
			buf_puts(&q, "\"");
			res = run(p, q.data, PGRES_COMMAND_OK, &st);
			buf_finish(&q);
			if (!res)
				return st;
			PQclear(res);
			exists = false;
		}
	}
	if (exists && p->cf->failover_slot && PQserverVersion(p->conn) >= 170000 &&
	    !p->facts.failover) {
		/* A slot from before (or from --no-failover-slot): standbys should sync it. */
		buf_puts(&q, "ALTER_REPLICATION_SLOT \"");
		buf_puts(&q, p->cf->slot);
		buf_puts(&q, "\" (FAILOVER true)");
		res = run(p, q.data, PGRES_COMMAND_OK, &st);
		buf_finish(&q);
		if (!res)
			return st;
		PQclear(res);
		p->altered_failover = true;
	}
	if (exists)
		return PG_OK;
	if (!p->cf->create_slot) {
		snprintf(p->errmsg, sizeof(p->errmsg),
		         "replication slot \"%s\" does not exist and --no-create-slot is set: create it "
		         "with SELECT pg_create_logical_replication_slot('%s', '%s') or drop "
		         "--no-create-slot",
		         p->cf->slot, p->cf->slot, p->cf->plugin);
		return PG_FATAL_SLOT;
	}
	/* A publication that would lose events is refused before a slot holds WAL for it. */
	if (strcmp(p->cf->plugin, "pgoutput") == 0) {
		st = ensure_publication(p, false);
		if (st != PG_OK)
			return st;
	}
	buf_puts(&q, "CREATE_REPLICATION_SLOT \"");
	buf_puts(&q, p->cf->slot);
	buf_puts(&q, "\" LOGICAL ");
	buf_puts(&q, p->cf->plugin);
	buf_puts(&q, " (SNAPSHOT 'nothing'");
	if (p->cf->failover_slot && PQserverVersion(p->conn) >= 170000)
		buf_puts(&q, ", FAILOVER");
	buf_puts(&q, ")");
	res = run(p, q.data, PGRES_TUPLES_OK, &st);
	buf_finish(&q);
	if (!res) {
		/* Another relay may have created it a moment ago: that one is fine too. */
		if (strstr(p->errmsg, "already exists"))
			return PG_RETRY;
		return st;
	}
	snprintf(p->plugin, sizeof(p->plugin), "%s", p->cf->plugin);
	p->slot_confirmed = LSN_INVALID;
	if (PQntuples(res) == 1 && PQnfields(res) >= 2 && !PQgetisnull(res, 0, 1))
		(void)lsn_parse(PQgetvalue(res, 0, 1), strlen(PQgetvalue(res, 0, 1)), &p->slot_confirmed);
	PQclear(res);
	p->created_slot = true;
	return PG_OK;
}

/*
 * The outbox table must exist and have the id column and every column the
 * stream template routes by; otherwise every row would be dead-lettered.
 */
static enum pg_status check_table(struct pgrepl *p)
{
	enum pg_status st;
	struct stream_tmpl *t;
	struct pg_table tbl;
	PGresult *failed;
	enum pg_fact fact;
	char err[256];
	const char *missing = NULL, *from = NULL;

	fact = pg_table_read(p->conn, p->cf->table, false, &tbl, &failed);
	if (pg_table_refusal(fact, p->cf->table, p->errmsg, sizeof(p->errmsg))) {
		pg_table_free(&tbl);
		return fact == PG_FACT_BAD_NAME ? PG_FATAL_USAGE : PG_FATAL_SCHEMA;
	}
	if (fact != PG_FACT_OK) {
		pg_table_free(&tbl);
		st = fact_failed(p, fact, failed);
		return st == PG_STANDBY ? PG_RETRY : st;
	}
	/* The real names, not --table's spelling: wal2json's add-tables and the
	 * change objects carry those. */
	free(p->tbl_schema);
	free(p->tbl_name);
	p->tbl_schema = tbl.schema;
	p->tbl_name = tbl.name;
	tbl.schema = tbl.name = NULL;
	if (pg_table_column(&tbl, p->cf->id_column) < 0) {
		missing = p->cf->id_column;
		from = "--id-column";
	}
	t = stream_tmpl_compile(p->cf->stream, err, sizeof(err));
	for (size_t i = 0; t && !missing && i < stream_tmpl_ncolumns(t); i++) {
		if (pg_table_column(&tbl, stream_tmpl_column(t, i)) < 0) {
			missing = stream_tmpl_column(t, i);
			from = "--stream";
		}
	}
	if (missing)
		snprintf(p->errmsg, sizeof(p->errmsg),
		         "column \"%s\" (named by %s) does not exist in outbox table \"%s\": add the "
		         "column or fix %s",
		         missing, from, p->cf->table, from);
	stream_tmpl_free(t);
	pg_table_free(&p->cols);
	p->cols = tbl;
	return missing ? PG_FATAL_SCHEMA : PG_OK;
}

/* pgoutput leaves generated columns out of its rows, wal2json prints them: said once. */
static void warn_generated(struct pgrepl *p)
{
	struct buf names = {0};

	for (int i = 0; i < p->cols.ncols; i++) {
		if (!p->cols.cols[i].generated)
			continue;
		if (names.len)
			buf_puts(&names, ", ");
		buf_puts(&names, p->cols.cols[i].name);
	}
	if (names.len == 0 && !names.failed)
		return;
	p->warned_generated = true;
	log_warn("outbox table %s.%s has generated column(s) %s, which pgoutput leaves out of "
	         "its rows: their events lack those fields (wal2json prints them; README, "
	         "\"pgoutput\")",
	         p->tbl_schema, p->tbl_name, names.failed || !names.data ? "?" : names.data);
	buf_finish(&names);
}

/* See pgrepl.h. */
void pgrepl_publication_query(struct buf *q, const char *pub, const char *schema, const char *name,
                              const char *tbl, bool v15)
{
	/* Row filters and column lists (15+) would drop rows or fields without a word. */
	buf_puts(q, "SELECT b.pubinsert, t.tablename IS NOT NULL, ");
	if (v15) {
		buf_puts(q, "t.rowfilter IS NOT NULL, coalesce(cardinality(t.attnames), 0) < (SELECT "
		            "count(*) FROM pg_catalog.pg_attribute a WHERE a.attrelid = ");
		buf_put_sql_literal(q, tbl);
		buf_puts(q, "::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '')");
	} else {
		buf_puts(q, "false, false");
	}
	buf_puts(q, " FROM pg_catalog.pg_publication b LEFT JOIN pg_catalog.pg_publication_tables t "
	            "ON t.pubname = b.pubname AND t.schemaname = ");
	buf_put_sql_literal(q, schema);
	buf_puts(q, " AND t.tablename = ");
	buf_put_sql_literal(q, name);
	buf_puts(q, " WHERE b.pubname = ");
	buf_put_sql_literal(q, pub);
}

/* See pgrepl.h. */
bool pgrepl_publication_whole(const char *const cells[4], const char *pub, const char *tbl,
                              char *why, size_t whylen)
{
	if (strcmp(cells[0], "t") != 0)
		snprintf(why, whylen,
		         "publication \"%s\" does not publish inserts: run ALTER PUBLICATION \"%s\" SET "
		         "(publish = 'insert')",
		         pub, pub);
	else if (strcmp(cells[1], "t") != 0)
		snprintf(why, whylen,
		         "publication \"%s\" does not include the outbox table %s: run ALTER PUBLICATION "
		         "\"%s\" ADD TABLE %s",
		         pub, tbl, pub, tbl);
	else if (strcmp(cells[2], "t") == 0 || strcmp(cells[3], "t") == 0)
		snprintf(why, whylen,
		         "publication \"%s\" publishes %s with a %s: rows or columns it leaves out would "
		         "never reach the streams; run ALTER PUBLICATION \"%s\" SET TABLE %s",
		         pub, tbl, strcmp(cells[2], "t") == 0 ? "row filter (WHERE)" : "column list", pub,
		         tbl);
	else
		return true;
	return false;
}

/* See pgrepl.h. */
void pgrepl_publication_missing_for_slot(char *out, size_t outlen, const char *pub,
                                         const char *slot, const char *tbl)
{
	snprintf(out, outlen,
	         "publication \"%s\" does not exist, and slot \"%s\" does: pgoutput reads a "
	         "publication as of each change it decodes, so one made now would not cover what "
	         "the slot holds; create it (CREATE PUBLICATION \"%s\" FOR TABLE %s WITH "
	         "(publish = 'insert')), drop the slot (SELECT pg_drop_replication_slot('%s')) and "
	         "start the relay, which makes it again; then outbox-relay republish the rows "
	         "committed since the old slot was made",
	         pub, slot, pub, tbl, slot);
}

/*
 * pgoutput: the publication must publish every insert of the outbox table,
 * whole: created FOR TABLE ... WITH (publish = 'insert') when missing (the
 * role must own the table, or be able to create publications); an existing
 * one is checked, and what is wrong is said with the statement that fixes it.
 * pgoutput reads the publication as of each change it decodes: for an
 * existing slot a missing one is not made, since it would not cover what the
 * slot holds (the relay makes the publication first, then the slot).
 */
static enum pg_status ensure_publication(struct pgrepl *p, bool slot_exists)
{
	const char *pub = pgrepl_publication(p);
	enum pg_status st = PG_RETRY;
	struct buf q = {0}, tbl = {0};
	PGresult *res;

	buf_put_sql_ident(&tbl, p->tbl_schema);
	buf_putc(&tbl, '.');
	buf_put_sql_ident(&tbl, p->tbl_name);
	pgrepl_publication_query(&q, pub, p->tbl_schema, p->tbl_name, tbl.data ? tbl.data : "",
	                         PQserverVersion(p->conn) >= 150000);
	res = q.failed || tbl.failed ? NULL : run(p, q.data, PGRES_TUPLES_OK, &st);
	buf_finish(&q);
	if (!res) {
		buf_finish(&tbl);
		return st;
	}
	if (slot_exists && PQntuples(res) == 0) {
		pgrepl_publication_missing_for_slot(p->errmsg, sizeof(p->errmsg), pub, p->cf->slot,
		                                    tbl.data);
		PQclear(res);
		buf_finish(&tbl);
		return PG_FATAL_SETUP;
	}
	if (PQntuples(res) == 0) {
		PQclear(res);
		buf_puts(&q, "CREATE PUBLICATION ");
		buf_put_sql_ident(&q, pub);
		buf_puts(&q, " FOR TABLE ");
		buf_puts(&q, tbl.data);
		buf_puts(&q, " WITH (publish = 'insert')");
		res = q.failed ? NULL : PQexec(p->conn, q.data);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			char why[400];

			snprintf(why, sizeof(why), "%s", PQerrorMessage(p->conn));
			why[strcspn(why, "\n")] = '\0';
			snprintf(p->errmsg, sizeof(p->errmsg),
			         "publication \"%s\" does not exist and could not be created (%s): run %s; "
			         "as the table's owner, or point --publication at one that publishes the "
			         "table's inserts",
			         pub, why, q.data ? q.data : "CREATE PUBLICATION");
			PQclear(res);
			buf_finish(&q);
			buf_finish(&tbl);
			return PG_FATAL_SETUP;
		}
		PQclear(res);
		buf_finish(&q);
		buf_finish(&tbl);
		return PG_OK;
	} else {
		const char *cells[4] = {PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2),
		                        PQgetvalue(res, 0, 3)};

		st = pgrepl_publication_whole(cells, pub, tbl.data, p->errmsg, sizeof(p->errmsg))
		         ? PG_OK
		         : PG_FATAL_SETUP;
	}
	PQclear(res);
	buf_finish(&tbl);
	return st;
}

enum pg_status pgrepl_start(struct pgrepl *p)
{
	enum pg_status st = PG_RETRY;
	struct buf q = {0};
	PGresult *res;

	pgrepl_close(p);
	if (!connect_db(p, &st))
		goto fail;

	res = run(p, "IDENTIFY_SYSTEM", PGRES_TUPLES_OK, &st);
	if (!res)
		goto fail;
	if (!pgrepl_identity(res, p->system_id, p->dbname, &p->hist)) {
		PQclear(res);
		set_err(p, "",
		        "IDENTIFY_SYSTEM returned no database: the connection must use "
		        "replication=database and a dbname");
		st = PG_FATAL_SETUP;
		goto fail;
	}
	PQclear(res);
	p->xlogpos = p->hist.wal_end;
	if (p->hist.tli > 1) {
		char herr[256];

		/* Without it the record is judged by the WAL end alone (slot_record.h). */
		if (!pgrepl_read_history(p->conn, p->hist.tli, &p->hist, herr, sizeof(herr)))
			log_warn("could not read the server's timeline history (%s): a failover to a "
			         "standby that was behind is seen only while its WAL ends before the slot "
			         "record",
			         herr);
	}
	st = check_owner(p);
	if (st != PG_OK)
		goto fail;

	/* Commit timestamps in UTC, and bytea in hex (wal2json corrupts escape output). */
	res = run(p, "SET TimeZone = 'UTC'", PGRES_COMMAND_OK, &st);
	if (!res)
		goto fail;
	PQclear(res);
	/* Dates and timestamps as 2026-11-24 00:05:11.289898+00 whatever the server's
	 * datestyle: the format outbox_emit_message() gives created_at too. */
	res = run(p, "SET DateStyle = 'ISO'", PGRES_COMMAND_OK, &st);
	if (!res)
		goto fail;
	PQclear(res);
	res = run(p, "SET bytea_output = 'hex'", PGRES_COMMAND_OK, &st);
	if (!res)
		goto fail;
	PQclear(res);

	st = check_table(p);
	if (st != PG_OK)
		goto fail;
	st = ensure_slot(p);
	if (st != PG_OK)
		goto fail;

	if (strcmp(p->plugin, "pgoutput") == 0) {
		bool stream = p->cf->pgoutput_streaming && PQserverVersion(p->conn) >= 140000;

		if (!p->warned_generated)
			warn_generated(p);

		st = p->created_slot ? PG_OK : ensure_publication(p, true);
		if (st != PG_OK)
			goto fail;
		/* Always 0/0, as below. Messages of any prefix come: the relay filters. */
		buf_puts(&q, "START_REPLICATION SLOT \"");
		buf_puts(&q, p->cf->slot);
		/* Protocol 2 streams a large transaction as it is decoded (14+): the relay holds
		 * it as it holds any other until its (Stream) Commit (relay_wal.c). */
		buf_puts(&q, "\" LOGICAL 0/0 (proto_version ");
		buf_puts(&q, stream ? "'2'" : "'1'");
		buf_puts(&q, ", publication_names ");
		{
			struct buf names = {0};

			buf_put_sql_ident(&names, pgrepl_publication(p));
			buf_put_sql_literal(&q, names.data ? names.data : "");
			buf_finish(&names);
		}
		if (PQserverVersion(p->conn) >= 140000)
			buf_puts(&q, ", messages 'true'");
		if (stream)
			buf_puts(&q, ", streaming 'on'");
		buf_puts(&q, ")");
		goto start;
	}
	/* Always 0/0: the server starts at the slot's confirmed position; a higher
	 * start would silently skip transactions. */
	buf_puts(&q, "START_REPLICATION SLOT \"");
	buf_puts(&q, p->cf->slot);
	buf_puts(&q, "\" LOGICAL 0/0 (\"format-version\" '2', \"include-transaction\" '1', "
	             "\"include-xids\" '1', \"include-lsn\" '1', \"include-timestamp\" '1', "
	             "\"include-types\" '1', \"include-typmod\" '0', \"add-tables\" ");
	{
		struct buf filt = {0};

		put_table_filter(&filt, p->tbl_schema, p->tbl_name);
		buf_put_sql_literal(&q, filt.data ? filt.data : "");
		buf_finish(&filt);
	}
	buf_puts(&q, ", \"add-msg-prefixes\" ");
	buf_put_sql_literal(&q, p->cf->message_prefix);
	buf_puts(&q, ")");
start:
	if (q.failed) {
		set_err(p, "", "out of memory");
		goto fail_q;
	}
	res = run(p, q.data, PGRES_COPY_BOTH, &st);
	if (!res)
		goto fail_q;
	PQclear(res);
	buf_finish(&q);
	if (PQsetnonblocking(p->conn, 1) != 0) {
		set_err(p, "could not set the connection non-blocking: ", PQerrorMessage(p->conn));
		st = PG_RETRY;
		goto fail;
	}
	p->streaming = true;
	return PG_OK;
fail_q:
	buf_finish(&q);
fail:
	pgrepl_close(p);
	return st;
}

bool pgrepl_consume(struct pgrepl *p)
{
	if (!p->conn || PQconsumeInput(p->conn) == 0) {
		set_err(p, "lost the PostgreSQL connection: ", p->conn ? PQerrorMessage(p->conn) : "");
		return false;
	}
	return true;
}

void *pgrepl_take_buffer(struct pgrepl *p)
{
	void *b = p->copybuf;

	p->copybuf = NULL;
	return b;
}

void *pgrepl_buffer(const struct pgrepl *p)
{
	return p->copybuf;
}

void pgrepl_free_buffer(void *buf)
{
	PQfreemem(buf);
}

int pgrepl_next(struct pgrepl *p, struct pg_msg *ret)
{
	const unsigned char *b;
	int n;

	if (p->copybuf) {
		PQfreemem(p->copybuf);
		p->copybuf = NULL;
	}
	if (!p->conn)
		return -1;
	n = PQgetCopyData(p->conn, &p->copybuf, 1);
	if (n == 0)
		return 0;
	if (n == -1) {
		PGresult *res = PQgetResult(p->conn);

		if (PQresultStatus(res) == PGRES_COMMAND_OK)
			set_err(p, "", "the server ended replication");
		else
			set_err(p, "replication stream ended: ", PQerrorMessage(p->conn));
		PQclear(res);
		if (strstr(p->errmsg, "publication") && strstr(p->errmsg, "does not exist")) {
			/* pgoutput met a change from before its publication was made: every
			 * reconnect would meet it again (or, seen here, pass over it). */
			append_hint(p, "the slot was made before its publication, and pgoutput reads a "
			               "publication as of each change: drop the slot and start the "
			               "relay, which makes the publication first, then the slot; then "
			               "outbox-relay republish the rows committed since the old slot "
			               "was made");
			p->stream_fatal = true;
		}
		return -1;
	}
	if (n < 0) {
		set_err(p, "could not read from the replication stream: ", PQerrorMessage(p->conn));
		return -1;
	}
	b = (const unsigned char *)p->copybuf;
	switch (b[0]) {
	case 'w':
		if (n < 25) {
			set_err(p, "", "malformed XLogData message (shorter than its header)");
			return -1;
		}
		ret->type = 'w';
		ret->data_start = get_be64(b + 1); /* dataStart */
		ret->wal_end = get_be64(b + 9);    /* walEnd */
		/* b + 17: sendTime, unused */
		ret->reply_requested = false;
		ret->data = p->copybuf + 25;
		ret->len = (size_t)n - 25;
		return 1;
	case 'k':
		if (n < 18) {
			set_err(p, "", "malformed keepalive message");
			return -1;
		}
		ret->type = 'k';
		ret->data_start = LSN_INVALID;
		ret->wal_end = get_be64(b + 1); /* walEnd: the server's sentPtr */
		/* b + 9: sendTime, unused */
		ret->reply_requested = b[17] != 0;
		ret->data = NULL;
		ret->len = 0;
		return 1;
	default:
		snprintf(p->errmsg, sizeof(p->errmsg), "unexpected replication message type 0x%02x", b[0]);
		return -1;
	}
}

bool pgrepl_send_status(struct pgrepl *p, lsn_t received, lsn_t confirmed, bool reply_requested)
{
	unsigned char msg[34];

	if (!p->conn || !p->streaming)
		return false;
	msg[0] = 'r';
	put_be64(msg + 1, received);   /* write */
	put_be64(msg + 9, confirmed);  /* flush: what Redis acknowledged */
	put_be64(msg + 17, confirmed); /* apply */
	put_be64(msg + 25, (uint64_t)time_unix_to_pg(time_now_us())); /* sendTime */
	msg[33] = reply_requested ? 1 : 0;
	if (PQputCopyData(p->conn, (const char *)msg, sizeof(msg)) <= 0 || PQflush(p->conn) < 0) {
		set_err(p, "could not send a status update: ", PQerrorMessage(p->conn));
		return false;
	}
	return true;
}

void pgrepl_stop(struct pgrepl *p, lsn_t received, lsn_t confirmed, int timeout_ms)
{
	int64_t deadline = time_mono_us() + (int64_t)timeout_ms * 1000;

	/* Non-blocking throughout: on a dead network neither the final status,
	 * the CopyDone nor the drain may hold the process past timeout_ms. */
	if (p->conn && p->streaming && pgrepl_send_status(p, received, confirmed, false) &&
	    PQputCopyEnd(p->conn, NULL) == 1) {
		for (;;) {
			int64_t left = deadline - time_mono_us();
			int flushed = PQflush(p->conn), n;
			char *buf;
			struct pollfd pfd = {.fd = PQsocket(p->conn), .events = POLLIN};

			if (flushed < 0)
				break;
			while ((n = PQgetCopyData(p->conn, &buf, 1)) > 0)
				PQfreemem(buf);
			if (n == -1) { /* the server ended the COPY: collect its results */
				PGresult *res;

				while (!PQisBusy(p->conn) && (res = PQgetResult(p->conn)) != NULL)
					PQclear(res);
				if (!PQisBusy(p->conn))
					break;
			} else if (n < -1) {
				break;
			}
			if (left <= 0)
				break;
			if (flushed == 1)
				pfd.events |= POLLOUT;
			if (poll(&pfd, 1, (int)((left + 999) / 1000)) <= 0 || PQconsumeInput(p->conn) == 0)
				break;
		}
	}
	pgrepl_close(p);
}
