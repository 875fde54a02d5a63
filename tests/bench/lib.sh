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
