#!/bin/bash
# postgres-entrypoint.sh - first start: initdb, configure logical decoding for
# wal2json, create the application database, load sql/outbox.sql and
# sql/roles.sql, set the outbox_relay password from a Docker secret. Every
# start: run postgres in the foreground (PID 1 of the container).
#
# Environment: PGDATA (set by the image), POSTGRES_DB (default app),
# PG_RELAY_PASSWORD_FILE (default /run/secrets/pg_relay_password),
# PGPORT (default 5432), INITDB_DIR (default /docker-entrypoint-initdb.d: outbox.sql, roles.sql).
set -euo pipefail

DB=${POSTGRES_DB:-app}
PWFILE=${PG_RELAY_PASSWORD_FILE:-/run/secrets/pg_relay_password}
INITDB_DIR=${INITDB_DIR:-/docker-entrypoint-initdb.d}
export PGPORT=${PGPORT:-5432}

psql_init() { psql -X -q -v ON_ERROR_STOP=1 -U postgres "$@"; }

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	echo "postgres-entrypoint: initializing $PGDATA (database $DB)"
	# Local socket: peer (only the postgres OS user, i.e. docker exec); TCP: SCRAM.
	initdb -D "$PGDATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
		-E UTF8 --locale=C.UTF-8 >/dev/null
	cat >>"$PGDATA/postgresql.conf" <<-CONF
		# --- outbox-relay compose stack ---
		listen_addresses = '*'
		wal_level = logical
		max_wal_senders = 10
		max_replication_slots = 10
		# Disk cap for WAL retained by an unconsumed slot (the slot is lost past it).
		max_slot_wal_keep_size = '1GB'
		password_encryption = 'scram-sha-256'
	CONF
	# Debian's 15.19+ and 17+ builds only let listed plugins decode, so wal2json
	# must be in output_plugin_libraries there; 15.18 and upstream builds have
	# no such setting and refuse to start with it. Ask the server.
	if postgres --describe-config 2>/dev/null | cut -f1 | grep -qx output_plugin_libraries; then
		echo "output_plugin_libraries = 'pgoutput, test_decoding, wal2json'" >>"$PGDATA/postgresql.conf"
	fi
	cat >>"$PGDATA/pg_hba.conf" <<-HBA
		# --- outbox-relay compose stack ---
		# The relay's role, by password, on the application database only: its
		# replication=database connection matches the database column. The
		# compose network gets no "replication" line (physical replication).
		host    $DB    outbox_relay    samenet    scram-sha-256
	HBA

	# Load the schema with the server listening on the unix socket only, so the
	# healthcheck (TCP) does not pass before initialization is complete.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w -t 60 start >/dev/null
	psql_init -d postgres -c "CREATE DATABASE \"$DB\""
	PGOPTIONS='-c client_min_messages=warning' psql_init -d "$DB" -f "$INITDB_DIR/outbox.sql"
	psql_init -d "$DB" -f "$INITDB_DIR/roles.sql" >/dev/null
	if [ -s "$PWFILE" ]; then
		# The password goes in as a psql variable, never on a command line.
		psql_init -d "$DB" -v pw="$(head -n 1 "$PWFILE")" <<-'SQL'
			ALTER ROLE outbox_relay PASSWORD :'pw';
		SQL
		echo "postgres-entrypoint: outbox_relay password set from $PWFILE"
	else
		echo "postgres-entrypoint: $PWFILE missing: outbox_relay has no password and cannot log in over TCP" >&2
	fi
	pg_ctl -D "$PGDATA" -m fast -w -t 60 stop >/dev/null
	echo "postgres-entrypoint: initialized"
fi

exec postgres -D "$PGDATA"
