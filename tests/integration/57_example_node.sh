#!/bin/bash
# 57_example_node: deploy/examples/node/consumer.js, the Node.js consumer
# example (ioredis vendored with its lockfile, Debian's node-pg), against the
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
# vendor/ folder (no network, nothing written to the source tree).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/example_consumer.sh"

EXAMPLE_DIR=$TESTS_DIR/../deploy/examples/node
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	skip "no node or npm on PATH (Debian: nodejs npm node-pg)"
fi
# pg from the system (Debian's node-pg in /usr/share/nodejs), not from vendor/.
(cd / && node -e 'require("pg")') >/dev/null 2>&1 || skip "node cannot require('pg') (Debian: node-pg)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || skip "node $(node --version) is older than 18"
example_tooling_check
setup_tmp
log "node $(node --version), npm $(npm --version), pg $(cd / && node -p 'require("pg/package.json").version')"

mkdir "$T/node"
cp "$EXAMPLE_DIR/consumer.js" "$EXAMPLE_DIR/package.json" "$EXAMPLE_DIR/package-lock.json" "$T/node/"
cp -r "$EXAMPLE_DIR/vendor" "$T/node/vendor"
(cd "$T/node" && HOME=$T/node npm ci --offline --cache "$T/npm-cache" --no-audit --no-fund --no-update-notifier) \
	>"$T/npm-ci.log" 2>&1 || fail "npm ci --offline from vendor/ failed: $(tail -n 20 "$T/npm-ci.log")"
assert_eq "$(cd "$T/node" && node -p 'require("./package.json").dependencies.ioredis')" \
	"$(cd "$T/node" && node -p 'require("ioredis/package.json").version')" "ioredis installed from vendor/ at the pinned version"

WORKER=(node "$T/node/consumer.js")
example_consumer_scenario
