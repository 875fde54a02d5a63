-- roles.sql - the least-privileged PostgreSQL role for outbox-relay.
--
-- Load as a superuser (PostgreSQL 15 lets only superusers create or alter
-- REPLICATION roles), in any database, once per cluster (roles are cluster-wide):
--     psql -X -v ON_ERROR_STOP=1 -d yourdb -f sql/roles.sql
-- then set the password outside this file, so it never lands in a repository
-- or in the server log:
--     psql -X -d yourdb -c '\password outbox_relay'
-- (psql hashes it client-side; with password_encryption = scram-sha-256, the
-- PostgreSQL 15 default, only the SCRAM verifier reaches the server).
-- The relay reads the password from --pg-password-file / OUTBOX_RELAY_PG_PASSWORD_FILE.
-- The file is idempotent.
--
-- What the role needs, and why nothing else:
--  * LOGIN, and REPLICATION: in PostgreSQL 15 a REPLICATION role may open a
--    replication=database connection, create a logical slot
--    (CREATE_REPLICATION_SLOT ... LOGICAL wal2json) and stream from it
--    (START_REPLICATION), and read pg_replication_slots.
--  * No privileges on the outbox table or any other table: logical decoding
--    reads the WAL and the catalogs through a historic snapshot, not the
--    table through the executor, so table GRANTs are never checked.
--  * At startup the relay runs SELECT pg_catalog.to_regclass('<schema.table>')
--    (needs only USAGE on the schema; PUBLIC has it on "public") and
--    SELECT ... FROM pg_catalog.pg_replication_slots (readable by PUBLIC).
--  * Not SUPERUSER, CREATEDB, CREATEROLE, BYPASSRLS, and no role memberships.
--    One thing only an administrator can do: on Debian's 15.19+ builds,
--    wal2json must be listed in output_plugin_libraries (a superuser-only GUC;
--    a REPLICATION role cannot set it per connection), in postgresql.conf:
--        output_plugin_libraries = 'pgoutput, test_decoding, wal2json'
--
-- pg_hba.conf: a replication=database connection is matched against the
-- *database* column like an ordinary connection; the "replication" keyword
-- only matches physical replication connections. So the line is
--     host    yourdb    outbox_relay    10.0.0.0/8    scram-sha-256
-- (not "host replication outbox_relay ..."). Reload after editing it.
--
-- Note: a REPLICATION role can also start physical replication and read the
-- whole WAL (all tables, all databases) that way; the pg_hba.conf line above
-- allows it only the named database's logical decoding, since physical
-- replication connections match only lines with "replication" in the
-- database column. Keep such lines away from outbox_relay.

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'outbox_relay') THEN
        CREATE ROLE outbox_relay LOGIN REPLICATION;
    END IF;
END
$roles$;

-- Whatever the role had before (re-runs, an older version of this file):
-- LOGIN REPLICATION and none of the other attributes. (Role memberships and
-- GRANTs someone added by hand are not revoked here; see the check query below.)
ALTER ROLE outbox_relay WITH LOGIN REPLICATION
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
-- No CONNECTION LIMIT: every standby relay (one per extra replica or sidecar)
-- reconnects every 1-3 s to see whether the slot is free, and a role limit would
-- turn those standbys into "retrying" relays. max_wal_senders bounds them anyway.

COMMENT ON ROLE outbox_relay IS
    'outbox-relay: logical decoding (wal2json or pgoutput) of the outbox; LOGIN REPLICATION only, no table privileges';

-- --plugin pgoutput: the publication (not executed by this file).
--
-- pgoutput decodes only the tables of a publication: --publication, by default
-- the slot's name (--slot, default outbox_relay). The relay creates a missing one
-- before its slot, but CREATE PUBLICATION ... FOR TABLE takes ownership of the
-- table (or SUPERUSER) and CREATE on the database, which outbox_relay has not:
-- it stops instead (exit code 3) with one line giving the statement, and makes
-- no slot. So, once, BEFORE the relay's first start with --plugin pgoutput, run
-- as the outbox table's owner (with CREATE on the database) or a superuser, in
-- the outbox's database:
--
--     CREATE PUBLICATION outbox_relay FOR TABLE public.outbox WITH (publish = 'insert');
--
-- (your --publication and --table if not the defaults; no row filter and no
-- column list: the relay refuses a publication that would leave events out.)
-- Before, not after: pgoutput reads a publication as of each change it
-- decodes, so a pgoutput slot made before its publication silently passes over
-- the rows it holds from before the publication (PostgreSQL 15, no error); the
-- relay refuses to start on such a slot while the publication is missing (exit
-- code 3), but cannot tell once someone has made it.
-- It is left out of this file on purpose: this file is for a superuser, once
-- per cluster, in any database; the publication belongs in the outbox's
-- database, with the table's names, made once.
-- With an existing publication the role still needs nothing more: no SELECT on
-- the table (decoding does not check table privileges), no CREATE on the
-- database, no ownership of the publication (the relay only reads
-- pg_publication and pg_publication_tables, readable by PUBLIC).
-- wal2json needs no publication; one that exists is ignored by a wal2json slot.

-- Check (expect: t | t | f | f | f | f | 0 | f):
--   SELECT r.rolcanlogin, r.rolreplication, r.rolsuper, r.rolcreatedb, r.rolcreaterole,
--          r.rolbypassrls,
--          (SELECT count(*) FROM pg_catalog.pg_auth_members m WHERE m.member = r.oid),
--          has_table_privilege(r.oid, 'public.outbox', 'SELECT')
--   FROM pg_catalog.pg_roles r WHERE r.rolname = 'outbox_relay';
