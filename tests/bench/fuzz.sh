#!/bin/bash
# fuzz.sh [MINUTES] [WORKDIR] [TARGET] - the long fuzz run (default 10
# minutes) of TARGET: decode (default: the wal2json decoder + event mapper),
# pgoutput (the pgoutput decoder) or replies (the CLUSTER SLOTS / COMMAND INFO parsers); the test suite runs
# the same targets for 30 s and 6 s.
set -euo pipefail
MIN=${1:-10}
exec "$(dirname "$0")/../fuzz/run.sh" $((MIN * 60)) "${2:-$(mktemp -d)}" "${3:-decode}"
