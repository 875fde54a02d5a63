#!/bin/bash
# fuzz.sh [MINUTES] - the long fuzz run (default 10 minutes) of the wal2json
# decoder + event mapper; the test suite runs the same target for 30 s.
set -euo pipefail
MIN=${1:-10}
exec "$(dirname "$0")/../fuzz/run.sh" $((MIN * 60)) "${2:-$(mktemp -d)}"
