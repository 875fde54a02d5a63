# tests/bench/lib.sh - sourced by the benchmark scripts (ROOT set).

# bench_relay_bin: a release build of this tree's relay in build-bench/
# (configured on first use); prints the binary's path.
bench_relay_bin() {
	local b=$ROOT/build-bench
	[ -f "$b/build.ninja" ] ||
		meson setup "$b" "$ROOT" -Dbuildtype=release -Dintegration_tests=false >/dev/null
	ninja -C "$b" cmd/outbox-relay/outbox-relay >/dev/null
	echo "$b/cmd/outbox-relay/outbox-relay"
}

# bench_old_relay_bin REF: a release build of the relay at git ref REF in a
# temp dir (the "before" of a comparison); prints the binary's path.
bench_old_relay_bin() {
	local d
	d=$(mktemp -d "${TMPDIR:-/tmp}/relay-old.XXXXXXXX")
	git -C "$ROOT" archive "$1" | tar -x -C "$d"
	meson setup "$d/build" "$d" -Dbuildtype=release -Dintegration_tests=false >/dev/null
	ninja -C "$d/build" cmd/outbox-relay/outbox-relay >/dev/null
	echo "$d/build/cmd/outbox-relay/outbox-relay"
}
