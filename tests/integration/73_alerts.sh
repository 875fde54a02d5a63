#!/bin/bash
# 73_alerts: deploy/prometheus/alerts.yml is valid and watches series the
# relay and outbox-consume really serve.
#  - every outbox_relay_* name in an alert expression appears in a /metrics
#    scrape of a relay streaming from the harness's PostgreSQL to its Redis,
#    every outbox_consume_* name in a scrape of `outbox-consume --http-addr`
#    reading what the relay published, and every label matcher of such a
#    name (e.g. state="streaming") matches at least one scraped sample; `up`
#    is Prometheus's own series;
#  - `promtool check rules` accepts the file and `promtool test rules` passes
#    deploy/prometheus/alerts.test.yml (each alert fires on synthetic series
#    that should trigger it, with the expected labels and text, and not on
#    others); promtool is in package prometheus, listed in
#    deploy/install-deps.sh; without it that part is skipped (exit 77) after
#    the scrape check has run.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS_DIR/.." && pwd)
RULES=$ROOT/deploy/prometheus/alerts.yml
[ -f "$RULES" ] || fail "missing $RULES"
command -v python3 >/dev/null || skip "python3 is not installed"
setup_tmp
pg_start
load_schema
redis_start
slot_create outbox_relay

relay_start --http-addr 127.0.0.1:0
wait_for "grep -q 'serving /metrics' '$RELAY_LOG'" 10 "the HTTP endpoint" || fail "no HTTP endpoint"
PORT=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$RELAY_LOG" | head -n 1)
[ -n "$PORT" ] || fail "no port in the log"
wait_for "slot_active outbox_relay" 15 "streaming" || fail "relay not streaming"
# One event and one dead letter, so that every family has samples.
psql_q "SELECT outbox_emit('order', '1', 'created', '{\"n\": 1}')" >/dev/null
psql_q "SELECT pg_logical_emit_message(true, 'outbox', '[1,2]')" >/dev/null
end=$(current_lsn)
wait_confirmed outbox_relay "$end" 30 || fail "slot never confirmed $end"
assert_eq 200 "$(http_get "$PORT" /metrics)" "/metrics status"
cp "$T/http.body" "$T/scrape"
relay_stop

# outbox-consume's scrape, once its loop has read the lag table.
need_consume_bin
env -u OUTBOX_CONSUME_GROUP -u OUTBOX_CONSUME_STREAM -u OUTBOX_CONSUME_STREAM_PATTERN \
	"$CONSUME_BIN" --redis-url "$REDIS_URL" --stream outbox:order --group alerts --create-group \
	--block-timeout 200ms --http-addr 127.0.0.1:0 >"$T/consume.stdout" 2>"$T/consume.log" &
CPID=$!
echo "$CPID" >>"$T/relay.pids"
wait_for "grep -q 'serving /metrics' '$T/consume.log'" 60 || fail "outbox-consume serves no HTTP endpoint"
CPORT=$(sed -n 's/.*serving \/metrics.*(port \([0-9]*\)).*/\1/p' "$T/consume.log" | head -n 1)
[ -n "$CPORT" ] || fail "no port in outbox-consume's log"
wait_for "[ \"\$(http_get $CPORT /metrics)\" = 200 ] && grep -q '^outbox_consume_lag_entries{' '$T/http.body'" 60 ||
	fail "outbox-consume's scrape never had the lag gauges"
cp "$T/http.body" "$T/consume.scrape"
kill -TERM "$CPID"
wait "$CPID" || fail "outbox-consume exited with $? after SIGTERM"

python3 - "$RULES" "$T/scrape" "$T/consume.scrape" >"$T/names.out" 2>&1 <<'PY' || { cat "$T/names.out"; fail "alerts.yml names series /metrics does not serve"; }
import re, sys
rules = open(sys.argv[1]).read()
scrapes = {p: [l for l in open(f).read().split("\n") if l and not l.startswith("#")]
           for p, f in (("outbox_relay_", sys.argv[2]), ("outbox_consume_", sys.argv[3]))}
exprs = []
lines = rules.split("\n")
for i, l in enumerate(lines):  # "expr: X" or "expr: >-" followed by indented lines
    m = re.match(r"^(\s*)expr:\s*(.*)$", l)
    if not m:
        continue
    e, j = m.group(2), i + 1
    if e.startswith(">"):  # a folded block: the lines indented deeper than "expr:"
        e = ""
        while j < len(lines) and (not lines[j].strip() or
                                  len(lines[j]) - len(lines[j].lstrip()) > len(m.group(1))):
            e += " " + lines[j].strip()
            j += 1
    exprs.append(e.strip())
bad, names = 0, set()
for e in exprs:
    for name, sel in re.findall(r"\b([a-z_:][a-z0-9_:]*)\s*(\{[^}]*\})?", e):
        prefix = next((p for p in scrapes if name.startswith(p)), None)
        if not prefix:
            continue
        samples = scrapes[prefix]
        names.add(name)
        have = [s for s in samples if re.match(re.escape(name) + r"[{ ]", s)]
        if not have:
            print("not served: %s (in %s)" % (name, e)); bad += 1; continue
        for lab, op, val in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', sel or ""):
            ok = [s for s in have if re.search(r'[{,]%s="([^"]*)"' % lab, s)]
            vals = [re.search(r'[{,]%s="([^"]*)"' % lab, s).group(1) for s in ok]
            hit = {"=": lambda v: v == val, "!=": lambda v: v != val,
                   "=~": lambda v: re.fullmatch(val, v), "!~": lambda v: not re.fullmatch(val, v)}[op]
            if not any(hit(v) for v in vals):
                print("no sample of %s has %s%s\"%s\"" % (name, lab, op, val)); bad += 1
print("%d expressions, %d relay and consumer series names: %s" % (len(exprs), len(names), " ".join(sorted(names))))
sys.exit(1 if bad or not exprs else 0)
PY
ok "$(tail -n 1 "$T/names.out")"

command -v promtool >/dev/null || skip "promtool is not installed (Debian package prometheus)"
promtool check rules "$RULES" >"$T/promtool.out" 2>&1 || { cat "$T/promtool.out"; fail "promtool check rules failed"; }
ok "promtool check rules: $(grep -o 'SUCCESS.*' "$T/promtool.out")"
# Each alert fires on the series that should trigger it, and not on others.
(cd "$(dirname "$RULES")" && promtool test rules alerts.test.yml) >"$T/promtool-test.out" 2>&1 ||
	{ cat "$T/promtool-test.out"; fail "promtool test rules failed"; }
ok "promtool test rules alerts.test.yml"
pass
