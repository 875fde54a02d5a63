#!/bin/bash
# 57_example_node: deploy/examples/node/consumer.js, the Node.js consumer
# example (ioredis and pg vendored with its lockfile), against the
# relay's streams: the scenario of example_consumer.sh (also run by
# 66_example_python).
#   (a) exactly once in effect across kill -9 (SIGKILLed twice, restarted
#       under its name, a second worker claims with XAUTOCLAIM): 300 effect
#       rows, one per event id, 0 pending, an effect repeated as a no-op;
#   (b) a poison event dead-lettered once after --max-deliveries 3 while
#       the rest flow;
#   (c) a second group "slow" that acked nothing keeps its entries through
#       the relay's --trim acked; a lost PostgreSQL connection is retried.
# The example's modules are installed into $T with `npm ci --offline` from its
# vendor/ folder (no network, nothing written to the source tree). Any node 18
# or later with its npm will do: Debian's (18, npm 9) or NodeSource's (20).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/example_consumer.sh"

EXAMPLE_DIR=$TESTS_DIR/../deploy/examples/node
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	skip "no node or npm on PATH (Debian: nodejs npm)"
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || skip "node $(node --version) is older than 18"
example_tooling_check
setup_tmp

mkdir "$T/node"
cp "$EXAMPLE_DIR/consumer.js" "$EXAMPLE_DIR/package.json" "$EXAMPLE_DIR/package-lock.json" "$T/node/"
cp -r "$EXAMPLE_DIR/vendor" "$T/node/vendor"
(cd "$T/node" && HOME=$T/node npm ci --offline --cache "$T/npm-cache" --no-audit --no-fund --no-update-notifier) \
	>"$T/npm-ci.log" 2>&1 || fail "npm ci --offline from vendor/ failed: $(tail -n 20 "$T/npm-ci.log")"
for m in ioredis pg; do
	assert_eq "$(cd "$T/node" && node -p "require('./package.json').dependencies['$m']")" \
		"$(cd "$T/node" && node -p "require('$m/package.json').version")" "$m installed from vendor/ at the pinned version"
done
# consumer.js must get pg from its node_modules, not from a system-wide copy.
assert_contains "$(cd "$T/node" && node -p "require.resolve('pg')")" "$(cd "$T/node" && pwd -P)/node_modules/pg/" \
	"require('pg') resolves to the example's node_modules"
log "node $(node --version), npm $(npm --version), $(cd "$T/node" && node -p \
	"['ioredis', 'pg'].map(m => m + ' ' + require(m + '/package.json').version).join(', ')")"

WORKER=(node "$T/node/consumer.js")
example_consumer_scenario
