#!/usr/bin/env python3
"""docs_check.py ROOT HELP_FILE - the documentation agrees with the code.

Used by 72_docs.sh; prints one "FAIL: ..." line per disagreement and exits 1
if there was any, else prints what it checked and exits 0.

(a) Exit codes: every value of enum relay_exit in lib/exitcode.h has a row in
    README's "Exit codes" table and at least one row in "Troubleshooting".

(b) Fatal messages. The rule that picks a message and its required text:
    - the messages: the format string (adjacent C string literals joined) of
      every log_error(...) call in lib/relay.c and lib/republish.c; in
      lib/pgrepl.c every append_hint(p, "...") hint and every
      snprintf(p->errmsg, ...) / set_err(p, "", "...") text followed within 8
      lines by a "return" or "st =" statement naming PG_FATAL_; the texts
      slot_record_why() in lib/slot_record.c writes (the reasons of exit 8);
      in lib/republish.c every
      snprintf(rp->err, ...) text followed within 8 lines by "return EXIT_"
      other than EXIT_OK; in the sink's files
      (lib/sink_redis.c, sink_node.c, sink_setup.c, sink_record.c,
      sink_trim.c, sink_reply.c)
      every snprintf(s->errmsg, ...) text followed within 8 lines by
      "return SINK_FATAL", and the OUTBOX_FOREIGN and lost-writes texts
      (SINK_ERR_FOREIGN, SINK_ERR_LOST); in lib/redis_conn.c every fix of
      the permanent_replies table (the hints of permanent Redis errors the
      relay, outbox-consume and status append);
    - the required text: the constant part before the first conversion
      ('%' and its flags, width, length and letter), blanks trimmed; when that
      is shorter than 12 characters (e.g. "Redis at " or a format that starts
      with "%s"), also the first 40 characters of the first later constant run
      of at least 12 characters; a format with neither (e.g. "%s") passes
      another module's text through, which the pgrepl.c / sink lists
      cover, and is not checked itself;
    - the text must occur in the Troubleshooting section (whitespace runs
      compared as one space, backticks ignored).

(c) Defaults and options. `outbox-relay --help` is the source of truth:
    - README's configuration table has exactly one row per --help option, in
      the same order, with the same flag, variable, default ("required" for a
      required option, empty when --help names none) and text (--help's
      description with its "(default: ...)" / "(required)" ending removed);
    - every default quoted in deploy/ (and in README.md prose): a sentence
      that names an OUTBOX_RELAY_* variable or a --flag (the nearest one
      before, preferring one within 60 characters) and then says
      "default X", "default: X", "default is X" or "(default X)" quotes X
      (with a unit word such as "1 h" or "10 seconds" folded to 1h, 10s), and
      "`X` (default)" after the name or "`--flag X` (default)" does too; X
      must equal that option's --help default (spaces ignored, so "8 MiB"
      equals "8MiB"). Also "(`--a`, `--b`, default N things / SIZE)".
"""
import os
import re
import sys

ROOT, HELP = sys.argv[1], sys.argv[2]
fails = []
checked = {"exit": 0, "fatal": 0, "options": 0, "defaults": 0}


def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def norm(s):
    return re.sub(r"\s+", " ", s.replace("`", "")).strip()


README = read("README.md")


def section(title, level):
    """Text of README section `title` (heading of `level` #s) up to the next heading of that level or higher."""
    m = re.search(r"^%s %s\s*$" % ("#" * level, re.escape(title)), README, re.M)
    if not m:
        fail("README has no section %r" % title)
        return ""
    rest = README[m.end():]
    end = re.search(r"^#{1,%d} " % level, rest, re.M)
    return rest[:end.start()] if end else rest


# ---- (a) exit codes ----
codes = [int(v) for v in re.findall(r"EXIT_[A-Z_]+\s*=\s*(\d+)", read("lib/exitcode.h"))]
if not codes:
    fail("no exit codes found in lib/exitcode.h")
exit_tab = section("Exit codes", 3)
trouble = section("Troubleshooting", 2)
trouble_n = norm(trouble)
for c in codes:
    checked["exit"] += 1
    if not re.search(r"^\| %d \|" % c, exit_tab, re.M):
        fail("exit code %d has no row in README's Exit codes table" % c)
    if not re.search(r"^\|\s*%d\s*\|" % c, trouble, re.M):
        fail("exit code %d has no row in README's Troubleshooting table" % c)

# ---- (b) fatal messages ----
LIT = r'"((?:[^"\\\n]|\\.)*)"'


def literals_at(src, pos):
    """Join the adjacent C string literals starting at src[pos:] (whitespace between them)."""
    out = []
    while True:
        m = re.compile(r"\s*" + LIT).match(src, pos)
        if not m:
            break
        out.append(m.group(1))
        pos = m.end()
    s = "".join(out)
    return s.replace('\\"', '"').replace("\\\\", "\\")


CONV = r"%[-+ #0-9.]*(?:ll|l|z|j|h)?[a-zA-Z]"


def required_texts(fmt):
    runs = re.split(CONV, fmt)
    head, later = runs[0].strip(), [r.strip() for r in runs[1:]]
    out = [head] if head else []
    if len(head) < 12:
        more = [r for r in later if len(r) >= 12]
        if more:
            out.append(more[0][:40].strip())
    return out


# The sink's files (lib/sink_int.h lists them): where its messages are written.
SINK_FILES = ("lib/sink_redis.c", "lib/sink_node.c", "lib/sink_setup.c", "lib/sink_record.c",
              "lib/sink_trim.c", "lib/sink_reply.c")


def line_of(src, pos):
    return src.count("\n", 0, pos) + 1


messages = []  # (where, format)
for rel in ("lib/relay.c", "lib/republish.c"):
    src = read(rel)
    for m in re.finditer(r"\blog_error\(", src):
        messages.append(("%s:%d" % (rel, line_of(src, m.start())), literals_at(src, m.end())))


def followed_by(src, pos, pattern, lines=8):
    tail = src[pos:].split("\n")[: lines + 1]
    return re.search(pattern, "\n".join(tail)) is not None


src = read("lib/pgrepl.c")
for m in re.finditer(r"\bappend_hint\(p,", src):
    messages.append(("lib/pgrepl.c:%d" % line_of(src, m.start()), literals_at(src, m.end())))
for m in re.finditer(r"\b(?:snprintf\(p->errmsg, sizeof\(p->errmsg\),|set_err\(p, \"\",)", src):
    if followed_by(src, m.end(), r"(return|st =)[^;\n]*PG_FATAL_"):
        messages.append(("lib/pgrepl.c:%d" % line_of(src, m.start()), literals_at(src, m.end())))
src = read("lib/slot_record.c")
m = re.search(r"\nconst char \*slot_record_why\(.*?\n}\n", src, re.S)
if not m:
    fail("lib/slot_record.c: no slot_record_why()")
gap_texts = list(re.finditer(r"snprintf\(why, len,", m.group(0)))
if len(gap_texts) < 3:
    fail("lib/slot_record.c: slot_record_why() writes %d texts, expected the 3 reasons of exit 8" % len(gap_texts))
for w in gap_texts:
    messages.append(("lib/slot_record.c slot_record_why", literals_at(m.group(0), w.end())))
src = read("lib/republish.c")
for m in re.finditer(r"\bsnprintf\(rp->err, sizeof\(rp->err\),", src):
    if followed_by(src, m.end(), r"return EXIT_(?!OK)"):
        messages.append(("lib/republish.c:%d" % line_of(src, m.start()), literals_at(src, m.end())))
for rel in SINK_FILES:
    src = read(rel)
    for m in re.finditer(r"\bsnprintf\(s->errmsg, sizeof\(s->errmsg\),", src):
        pre = src[max(0, m.start() - 200):m.start()]
        if followed_by(src, m.end(), r"return SINK_FATAL") or re.search(
            r"SINK_ERR_(FOREIGN|LOST)", pre.split("snprintf")[-1] if "snprintf" in pre else pre
        ):
            messages.append(("%s:%d" % (rel, line_of(src, m.start())), literals_at(src, m.end())))
src = read("lib/redis_conn.c")
m = re.search(r"permanent_replies\[\] = \{(.*?)\n\};", src, re.S)
if not m:
    fail("lib/redis_conn.c: no permanent_replies table")
else:
    for row in re.finditer(r"\{[^{}]*\}", m.group(1)):
        lits = re.findall(LIT, row.group(0))
        # the hint: the literals after the last NULL or prefix/text field
        hint = literals_at(row.group(0), re.search(r"(NULL|\"[^\"]*\"),\s*(NULL|\"[^\"]*\"),", row.group(0)).end())
        if hint:
            messages.append(("lib/redis_conn.c permanent_replies", hint))

for where, fmt in messages:
    reqs = required_texts(fmt)
    if not reqs:
        continue
    checked["fatal"] += 1
    for req in reqs:
        if norm(req) not in trouble_n:
            fail("%s: the fatal message %r has no Troubleshooting row containing %r" % (where, fmt, norm(req)))

# ---- (c) options and defaults ----
helptext = open(HELP, encoding="utf-8").read()
opts = []  # dicts: flag, env, default, text
cur = None
for line in helptext.split("\n"):
    m = re.match(r"^  (--\S+)(?: (\S+))?\s+env (OUTBOX_RELAY_[A-Z_]+)\s*$", line)
    if m:
        cur = {"flag": m.group(1) + (" " + m.group(2) if m.group(2) else ""), "env": m.group(3), "desc": []}
        opts.append(cur)
        continue
    if cur is not None and line.startswith("      "):
        cur["desc"].append(line.strip())
    else:
        cur = None
for o in opts:
    d = " ".join(o["desc"])
    o["default"] = ""
    m = re.search(r" \(default: (.*)\)$", d)
    if m:
        o["default"], d = m.group(1), d[: m.start()]
    elif d.endswith(" (required)"):
        o["default"], d = "required", d[: -len(" (required)")]
    o["text"] = d
if len(opts) < 20:
    fail("parsed only %d options from --help" % len(opts))
by_env = {o["env"]: o for o in opts}
by_flag = {}
for o in opts:
    f = o["flag"].split()[0]
    by_flag[f] = o
    if f.startswith("--[no-]"):
        by_flag["--" + f[7:]] = o
        by_flag["--no-" + f[7:]] = o

conf = section("Configuration", 2)
rows = []
for line in conf.split("\n"):
    if line.startswith("| `--"):
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows.append(cells)
if len(rows) != len(opts):
    fail("README's configuration table has %d rows, --help lists %d options" % (len(rows), len(opts)))
for i, o in enumerate(opts):
    checked["options"] += 1
    want = ["`%s`" % o["flag"], "`%s`" % o["env"],
            ("`%s`" % o["default"]) if o["default"] and o["default"] != "required" else o["default"], o["text"]]
    got = rows[i] if i < len(rows) else None
    if got != want:
        fail("README configuration row %d is\n    %s\n  --help says\n    %s" % (i + 1, " | ".join(got or ["(none)"]), " | ".join(want)))

files = ["README.md"]
for d, _, names in os.walk(os.path.join(ROOT, "deploy")):
    for n in names:
        if n.endswith((".yaml", ".yml", ".md", ".service", ".example", ".env", "Dockerfile", ".sh", ".acl", ".conf")):
            files.append(os.path.relpath(os.path.join(d, n), ROOT))
NAME = r"(OUTBOX_RELAY_[A-Z_]+|--(?:\[no-\])?[a-z][a-z-]+)"
DEFAULT = (r"\(?\bdefault(?:s to| is|:)?\s+[`\"']?([0-9A-Za-z_.:{}/-]*[0-9A-Za-z_{}/])"
           r"((?: (?:ms|s|seconds?|m|min|minutes?|h|hours?|d|days?|[KMG]i?B))?)(?=[`\"')]|[.,;:]?(?:\s|$))")
UNITS = {"second": "s", "seconds": "s", "min": "m", "minute": "m", "minutes": "m", "hour": "h",
         "hours": "h", "day": "d", "days": "d"}
for rel in sorted(set(files)):
    text = read(rel)
    # Comments: drop the leading "#" of each line so a sentence can span lines.
    text = re.sub(r"(?m)^\s*#+ ?", "", text) if not rel.endswith(".md") else text
    if rel == "README.md":  # the table is checked above
        text = "\n".join(l for l in text.split("\n") if not l.startswith("| `--"))
    for sent in re.split(r"(?<=[.!?])\s+(?=[A-Z`(*-])|\n\s*\n|\n- ", text):
        for m in re.finditer(DEFAULT, sent):
            before = sent[: m.start()]
            # The name nearest before "default": within 60 characters, else
            # anywhere earlier in the sentence ("X=16MiB keeps ...; the default is 8MiB").
            names = [n for n in re.findall(NAME, before[-60:]) if n in by_env or n in by_flag] or \
                [n for n in re.findall(NAME, before) if n in by_env or n in by_flag]
            if not names:
                continue
            o = by_env.get(names[-1]) or by_flag.get(names[-1])
            unit = m.group(2).strip()
            val = m.group(1) + UNITS.get(unit, unit)
            checked["defaults"] += 1
            if val.replace(" ", "") != o["default"].replace(" ", ""):
                fail("%s: %r says the default of %s is %r; --help says %r" % (rel, norm(sent)[:160], names[-1], val, o["default"]))
        # "`VALUE` (default)" after a name, or "`--flag VALUE` (default)".
        for m in re.finditer(r"`([^`]+)`\s+\(default\)", sent):
            words = m.group(1).split()
            if len(words) == 2 and words[0] in by_flag:
                name, val = words
            else:
                names = [n for n in re.findall(NAME, sent[: m.start()]) if n in by_env or n in by_flag]
                if not names:
                    continue
                name, val = names[-1], m.group(1)
            o = by_env.get(name) or by_flag.get(name)
            checked["defaults"] += 1
            if val != o["default"]:
                fail("%s: %r says the default of %s is %r; --help says %r" % (rel, norm(sent)[:160], name, val, o["default"]))
        # "default 10,000 events / 8 MiB"-style pairs right after two flags.
        m = re.search(r"\(`(--[a-z-]+)`, `(--[a-z-]+)`, default ([0-9,]+) \w+ / ([0-9.]+ ?[KMG]i?B)\)", sent)
        if m:
            for flag, val in ((m.group(1), m.group(3)), (m.group(2), m.group(4))):
                o = by_flag.get(flag)
                checked["defaults"] += 1
                if not o or val.replace(",", "").replace(" ", "") != o["default"]:
                    fail("%s: %s default quoted as %r; --help says %r" % (rel, flag, val, o and o["default"]))

print("checked: %d exit codes, %d fatal messages, %d options, %d quoted defaults" % (
    checked["exit"], checked["fatal"], checked["options"], checked["defaults"]))
sys.exit(1 if fails else 0)
