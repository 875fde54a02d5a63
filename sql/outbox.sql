-- outbox.sql - the transactional outbox that outbox-relay publishes to Redis Streams.
--
-- Load with:  psql -X -v ON_ERROR_STOP=1 -d yourdb -f sql/outbox.sql
-- The file is idempotent (CREATE ... IF NOT EXISTS / CREATE OR REPLACE) and may be
-- re-run after upgrades. It needs PostgreSQL 13+ (gen_random_uuid() is built in
-- since 13); it is tested on PostgreSQL 15.
--
-- ---------------------------------------------------------------------------
-- PostgreSQL prerequisites (server side, not done by this file)
-- ---------------------------------------------------------------------------
--  * Package: postgresql-15-wal2json (wal2json 2.x; the relay uses format-version 2).
--
--  * postgresql.conf (restart needed for the first three):
--        wal_level = logical
--        max_replication_slots = 10     # >= 1 per relay instance, plus any other consumers
--        max_wal_senders = 10           # >= 1 per relay instance, plus physical standbys
--        output_plugin_libraries = 'pgoutput, test_decoding, wal2json'
--    Debian's PostgreSQL 15.19+ builds add the GUC output_plugin_libraries with the
--    default 'pgoutput, test_decoding'; with that default every use of wal2json fails
--    with: library "wal2json" may not be used as an output plugin. It is a
--    superuser-only GUC: put it in postgresql.conf (reload is enough) or set it on a
--    superuser connection; a plain REPLICATION role cannot set it for itself.
--    Upstream/other builds without that GUC need nothing here (and reject the line
--    as an unknown parameter, so only add it where it exists:
--    SELECT 1 FROM pg_settings WHERE name = 'output_plugin_libraries').
--
--  * Optional disk safety cap: a replication slot retains WAL until the relay confirms
--    it. If the relay is down for long, WAL accumulates without bound unless
--        max_slot_wal_keep_size = '10GB'
--    is set. Past the cap PostgreSQL invalidates the slot (pg_replication_slots.wal_status
--    = 'lost'); the relay then exits with code 8 (4 when Redis holds no slot record of
--    it: README, "Gaps") and events in the lost range must be recovered from the outbox
--    table with outbox-relay republish (another reason to keep rows for a while).
--
--  * A login role for the relay with the REPLICATION attribute, e.g.
--        CREATE ROLE outbox_relay LOGIN REPLICATION PASSWORD '...';
--    (no table privileges: decoding reads WAL, and the startup schema check reads
--    only the catalogs; see sql/roles.sql)
--    and a pg_hba.conf line that lets it connect to the database (a
--    replication=database connection matches the *database* column, not the
--    "replication" keyword), e.g.
--        host  yourdb  outbox_relay  10.0.0.0/8  scram-sha-256
--
-- ---------------------------------------------------------------------------
-- Two ways to emit events
-- ---------------------------------------------------------------------------
-- 1. outbox_emit(...): INSERT into public.outbox in the caller's transaction.
--    wal2json decodes the INSERT; the relay publishes it once the transaction commits.
--    + the events are visible to SQL (debugging, replay, audits, backfills);
--    - the table grows forever unless something removes rows. Choose one:
--      a) periodic cleanup, e.g. SELECT outbox_purge(interval '7 days') from cron /
--         pg_cron. Deleting is safe: the relay ignores UPDATE/DELETE/TRUNCATE on the
--         outbox and only ever publishes INSERTs. Big DELETEs need vacuum to keep up.
--         The rows kept are what `outbox-relay republish` can heal a gap from (the
--         relay exits 8 when its slot was lost: README, "Gaps"): keep them longer
--         than it takes you to notice. b) and c) trade that away.
--      b) partition by created_at (range, e.g. daily) and DROP/DETACH old partitions:
--         no DELETE, no vacuum cost. Caveat: wal2json reports each change under the
--         *leaf partition's* name (it has nothing like pgoutput's
--         publish_via_partition_root), so the relay's --table must name the partition
--         being written, not the parent. This file creates a plain table.
--      c) insert-then-delete in the same transaction:
--             BEGIN; SELECT outbox_emit(...); DELETE FROM public.outbox WHERE id = ...; COMMIT;
--         The table stays empty (only dead tuples for vacuum), yet the INSERT is in WAL
--         and wal2json still decodes it, so the relay publishes it. You lose the SQL
--         visibility of (1) in exchange.
-- 2. outbox_emit_message(...): pg_logical_emit_message(true, 'outbox', <json>).
--    Transactional logical message: it is written to WAL only and decoded at commit
--    (never if the transaction rolls back).
--    + no table, no bloat, no vacuum, no cleanup job, slightly less WAL;
--    - invisible to SQL: once the relay has confirmed the LSN the event exists only in
--      Redis; nothing to replay from if Redis loses it.
--    The message body is the JSON object the relay publishes field by field
--    (id, aggregate_type, aggregate_id, event_type, payload, headers, created_at).
--    created_at has the row path's text format (UTC, 2026-11-24 00:05:11.289898+00),
--    not json_build_object's ISO 8601 rendering of a timestamptz.
--    Note wal2json cuts message content at the first NUL byte; JSON text has none.
--
-- Both variants must run in the same transaction as the business write they describe;
-- that is the whole point of an outbox. Both return the event id (uuid).

CREATE TABLE IF NOT EXISTS public.outbox (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE public.outbox IS
    'Transactional outbox: rows are published to Redis Streams by outbox-relay '
    '(only INSERTs are published; rows may be deleted at any time after commit).';

-- Optional: refuse rows the relay could not take, at commit, where the
-- application sees the error. A row costs the relay twice its size as wal2json
-- prints it (README, "Memory"); one larger than its memory limit allows gets it
-- OOM-killed before it can dead-letter the row. 16 MiB of payload text stays
-- under the default --max-event-bytes (64MiB) even when every character is
-- escaped twice.
-- ALTER TABLE public.outbox ADD CONSTRAINT outbox_row_size
--     CHECK (octet_length(payload::text) + octet_length(headers::text) <= 16 * 1024 * 1024);

-- For outbox_purge(): find old rows without a sequential scan.
CREATE INDEX IF NOT EXISTS outbox_created_at_idx ON public.outbox (created_at);

-- Insert one event; returns its id.
CREATE OR REPLACE FUNCTION public.outbox_emit(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT '{}')
RETURNS uuid
LANGUAGE sql
VOLATILE
AS $fn$
    INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, headers)
    VALUES (outbox_emit.aggregate_type,
            outbox_emit.aggregate_id,
            outbox_emit.event_type,
            outbox_emit.payload,
            coalesce(outbox_emit.headers, '{}'::jsonb))
    RETURNING id;
$fn$;

COMMENT ON FUNCTION public.outbox_emit(text, text, text, jsonb, jsonb) IS
    'Insert an event into public.outbox in the current transaction; returns its id.';

-- Emit one event as a transactional logical message (no table row); returns its id.
-- The prefix 'outbox' must match the relay's --message-prefix (default "outbox").
CREATE OR REPLACE FUNCTION public.outbox_emit_message(
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb DEFAULT '{}')
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
AS $fn$
DECLARE
    v_id uuid := gen_random_uuid();
BEGIN
    IF aggregate_type IS NULL OR aggregate_id IS NULL OR event_type IS NULL OR payload IS NULL THEN
        -- Same contract as the table's NOT NULL columns: fail in the caller's
        -- transaction rather than send the relay an event it must dead-letter.
        RAISE EXCEPTION 'outbox_emit_message: aggregate_type, aggregate_id, event_type and payload must not be NULL'
            USING ERRCODE = 'not_null_violation';
    END IF;
    PERFORM pg_logical_emit_message(
        true,           -- transactional: decoded at commit, dropped on rollback
        'outbox',
        json_build_object(
            'id',             v_id,
            'aggregate_type', aggregate_type,
            'aggregate_id',   aggregate_id,
            'event_type',     event_type,
            'payload',        payload,
            'headers',        coalesce(headers, '{}'::jsonb),
            -- The text the row path carries for outbox.created_at (wal2json prints
            -- timestamptz in the relay's session: TimeZone UTC, DateStyle ISO), so
            -- consumers see one format on both paths whatever this session's
            -- TimeZone and DateStyle are: 2026-11-24 00:05:11.289898+00
            -- (trailing zeros of the fraction dropped, as PostgreSQL prints it).
            'created_at',     rtrim(rtrim(to_char(now() AT TIME ZONE 'UTC',
                                                  'YYYY-MM-DD HH24:MI:SS.US'), '0'), '.') || '+00')::text);
    RETURN v_id;
END;
$fn$;

COMMENT ON FUNCTION public.outbox_emit_message(text, text, text, jsonb, jsonb) IS
    'Emit an event as a transactional logical message (prefix outbox) without a table row; returns its id.';

-- Delete published rows older than keep; returns the number of rows deleted.
-- Run it periodically (cron, pg_cron). The relay ignores DELETEs, so this never
-- produces stream entries. Only rows whose commit the relay has confirmed are safe to
-- delete if you rely on the table for replays; a generous keep (days) covers that.
CREATE OR REPLACE FUNCTION public.outbox_purge(keep interval DEFAULT interval '7 days')
RETURNS bigint
LANGUAGE sql
VOLATILE
AS $fn$
    WITH d AS (
        DELETE FROM public.outbox WHERE created_at < now() - keep RETURNING 1
    )
    SELECT count(*) FROM d;
$fn$;

COMMENT ON FUNCTION public.outbox_purge(interval) IS
    'Delete outbox rows older than keep (default 7 days); returns the count.';
