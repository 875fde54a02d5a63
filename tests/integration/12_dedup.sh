#!/bin/bash
# 12_dedup: two rows with the same id in different transactions produce one
# entry (the id in the stream's dedup state: time-bucket hashes with a TTL,
# in listpack encoding); a replay of the same WAL through a new slot
# into the same Redis adds nothing; with --dedup-window 0 (fresh slot, fresh
# Redis) both rows are published and no dedup keys are written.
. "$(dirname "$0")/lib.sh"
setup_tmp
pg_start
load_schema
psql_q "CREATE TABLE public.outbox_loose (id text, aggregate_type text, aggregate_id text, event_type text,
                                          payload jsonb, headers jsonb, created_at timestamptz DEFAULT now())"
redis_start
# All three slots exist before the rows are written, so each sees all of them.
slot_create s_a "" public.outbox_loose
slot_create s_replay "" public.outbox_loose
slot_create s_nodedup "" public.outbox_loose

ins() { psql_q "INSERT INTO outbox_loose (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('$1', 'order', '$2', 'created', '{}')"; }
ins dup-1 first
ins dup-1 second
ins uniq-1 third

relay_drain --slot s_a --table public.outbox_loose
assert_eq "dup-1 uniq-1" "$(rx fields outbox:order id | tr '\n' ' ' | sed 's/ $//')" "same id twice: published once"
assert_eq first "$(rx fields outbox:order aggregate_id | head_n 1)" "the first row wins"
base="outbox-relay:dd:{outbox:order}"
assert_eq 1 "$(redis_cli EXISTS "$base")" "dedup state $base exists"
assert_eq -1 "$(redis_cli TTL "$base")" "the dedup state's bucket index has no TTL"
shards=$(redis_cli --scan --pattern "$base:*")
assert_ne "" "$shards" "bucket hashes $base:<bucket>:<shard> exist"
ids=0
for k in $shards; do
	ttl=$(redis_cli TTL "$k")
	assert_ge "$ttl" 1 "bucket hash $k has a TTL"
	assert_ge 10800 "$ttl" "bucket hash $k TTL <= three windows (its bucket's end + window)"
	assert_eq listpack "$(redis_cli OBJECT ENCODING "$k")" "bucket hash $k is a listpack"
	ids=$((ids + $(redis_cli HLEN "$k") - $(redis_cli HEXISTS "$k" "")))
done
assert_eq 2 "$ids" "two ids (dup-1, uniq-1) in the bucket hashes"

# Replay everything through another slot into the same Redis: nothing new.
relay_drain --slot s_replay --table public.outbox_loose
assert_eq 2 "$(xlen outbox:order)" "replay through a new slot adds no entries"

# Fresh Redis, dedup disabled: both dup-1 rows.
redis_stop
rm -rf "$T/redis"
redis_start
relay_drain --slot s_nodedup --table public.outbox_loose --dedup-window 0
assert_eq "dup-1 dup-1 uniq-1" "$(rx fields outbox:order id | tr '\n' ' ' | sed 's/ $//')" "--dedup-window 0: every row published"
assert_eq "" "$(redis_cli --scan --pattern 'outbox-relay:d*')" "--dedup-window 0 writes no dedup keys"
pass
