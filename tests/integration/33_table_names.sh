#!/bin/bash
# 33_table_names: --table names the table as SQL would (case folded, quotes
# honoured), and the relay streams from the table PostgreSQL resolved it to.
# Before the fix, --table public.Outbox passed the startup check (to_regclass
# folds case) but wal2json's add-tables and the relay compared the name as
# written: nothing was published and the slot was confirmed past the rows.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
redis_start
psql_q 'CREATE TABLE public."Mixed Case" (LIKE public.outbox INCLUDING ALL)'
slot_create s_fold
slot_create s_quoted

emit() { # TABLE N TAG: N order events tagged TAG in one transaction
	psql_q "INSERT INTO $1 (aggregate_type, aggregate_id, event_type, payload)
	        SELECT 'order', '$3-' || g, 'created', '{}' FROM generate_series(1, $2) g" >/dev/null
}
emit public.outbox 5 fold
emit 'public."Mixed Case"' 3 quoted

# Upper case in --table, table created unquoted (lower case).
relay_drain --slot s_fold --table public.OUTBOX
assert_eq 5 "$(xlen outbox:order)" "--table public.OUTBOX: the 5 rows of public.outbox published"
assert_contains "$(cat "$RELAY_LOG")" "--table public.OUTBOX is the table public.outbox" \
	"the resolved table is logged"
assert_eq "fold-1 fold-2 fold-3 fold-4 fold-5" \
	"$(rx fields outbox:order aggregate_id | tr '\n' ' ' | sed 's/ $//')" "in commit order"

# A quoted name with a space and upper case: wal2json's add-tables needs the
# space escaped and the real case.
redis_cli DEL outbox:order >/dev/null
relay_drain --slot s_quoted --table 'public."Mixed Case"'
assert_eq "quoted-1 quoted-2 quoted-3" \
	"$(rx fields outbox:order aggregate_id | tr '\n' ' ' | sed 's/ $//')" \
	'--table public."Mixed Case": its 3 rows published, none of public.outbox'

# Names SQL cannot parse are a usage error, and one that folds to a table
# that does not exist is still exit 6; neither moves the slot.
before=$(slot_confirmed_lsn s_fold)
relay_run --slot s_fold --table 'public.Mixed Case' || true
if [ "$(pg_version_num)" -ge 160000 ]; then
	# to_regclass answers NULL for a name it cannot parse since PostgreSQL 16
	assert_eq 6 "$RELAY_RC" "an unquoted name with a space is no table: exit 6"
else
	assert_eq 2 "$RELAY_RC" "an unquoted name with a space is not a table name: exit 2"
	assert_contains "$(cat "$RELAY_LOG")" 'invalid --table public.Mixed Case: not an SQL table name; quote names' \
		"the error line says how to quote"
fi
relay_run --slot s_fold --table public.MixedCase || true
assert_eq 6 "$RELAY_RC" "public.MixedCase folds to public.mixedcase, which does not exist: exit 6"
assert_eq "$before" "$(slot_confirmed_lsn s_fold)" "the slot did not move"
pass
