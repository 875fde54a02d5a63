#!/bin/bash
# 72_docs: the documentation says what the code does. No servers.
#  (a) every exit code of lib/exitcode.h has a row in README's "Exit codes"
#      table and in its "Troubleshooting" table;
#  (b) every fatal message the code can print has a Troubleshooting row that
#      contains its constant text;
#  (c) README's configuration table is `outbox-relay --help` row for row (flag,
#      variable, default, text), and every default quoted in README prose and
#      under deploy/ equals the one --help prints.
# The rules (which messages count as fatal, which text of a format string must
# appear, what counts as a quoted default) are in the header of docs_check.py.
. "$(dirname "$0")/lib.sh"
setup_tmp
ROOT=$(cd "$TESTS_DIR/.." && pwd)
command -v python3 >/dev/null || skip "python3 is not installed"

"$RELAY_BIN" --help >"$T/help.txt" || fail "outbox-relay --help failed"
if ! python3 "$(dirname "$0")/docs_check.py" "$ROOT" "$T/help.txt" >"$T/check.out" 2>&1; then
	cat "$T/check.out"
	fail "the documentation disagrees with the code (lines above)"
fi
ok "$(tail -n 1 "$T/check.out")"
pass
