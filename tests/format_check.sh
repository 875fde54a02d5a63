#!/bin/bash
# format_check.sh - every C source and header of the tree is as clang-format
# (Debian 12's clang-format 14, the repository's .clang-format) writes it:
# `clang-format --dry-run --Werror` over the files git tracks (every *.c/*.h
# below the root when the tree is not a git checkout). Prints the first
# differences and fails on any. Fix with: clang-format -i <file>.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null ||
	{ echo "format_check: clang-format is not installed (apt-get install clang-format)"; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files '*.c' '*.h')
else
	mapfile -t files < <(find cmd lib tests deploy -name '*.c' -o -name '*.h')
fi
[ ${#files[@]} -gt 10 ] || { echo "format_check: only ${#files[@]} files found"; exit 1; }
bad=0
for f in "${files[@]}"; do
	if ! out=$(clang-format --dry-run --Werror "$f" 2>&1); then
		bad=$((bad + 1))
		printf '%s\n' "$out" | head -n 8
	fi
done
echo "format_check: ${#files[@]} files, $bad not as clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -n 1) writes them"
[ "$bad" = 0 ]
