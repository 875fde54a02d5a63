#!/usr/bin/env python3
"""cg_misses.py - instructions and L1 data-cache misses per event, by function,
from a callgrind dump made with --cache-sim=yes (redis_breakdown.sh with
CG_OPTS=--cache-sim=yes and OUT=DIR keeps them as DIR/cg-relay.out and
DIR/cg-bare.out).

    tests/bench/cg_misses.py DUMP EVENTS FUNCTION[,FUNCTION...]

Prints the whole process and each named function (inclusive costs, as
callgrind_annotate --inclusive=yes counts them), divided by EVENTS.
"""
import re
import subprocess
import sys

NUM = re.compile(r"[\d,]+|\.")


def rows(dump):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        toks, vals, i = line.split(), [], 0
        while i < len(toks) and len(vals) < 9:
            t = toks[i]
            if t.startswith("("):  # a share, "(12.3%)" or "( 3.4%)"
                i += 1 if t.endswith(")") else 2
            elif NUM.fullmatch(t):
                vals.append(0 if t == "." else int(t.replace(",", "")))
                i += 1
            else:
                break
        while i < len(toks) and (toks[i].startswith("(") or toks[i].endswith("%)")):
            i += 1
        if len(vals) == 9:
            yield " ".join(toks[i:]).split(" [")[0].replace("???:", ""), vals


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: cg_misses.py DUMP EVENTS FUNCTION[,FUNCTION...]")
    dump, n, want = argv[1], int(argv[2]), set(argv[3].split(","))
    found = False
    for name, v in rows(dump):
        if name in want or name == "PROGRAM TOTALS":
            ir, d1r, d1w = v[0], v[4], v[5]
            print(f"{name:28s} Ir/ev {ir / n:7.0f}  D1 misses/ev {(d1r + d1w) / n:6.1f}"
                  f"  (read {d1r / n:5.1f}, write {d1w / n:5.1f})")
            found = True
    if not found:
        sys.exit(f"cg_misses.py: {dump} has no cache-miss counts (made without --cache-sim=yes?)")


if __name__ == "__main__":
    main(sys.argv)
