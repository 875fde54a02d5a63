#!/bin/bash
# 71_manifests: the deployment files under deploy/ agree with the binary.
#  - every OUTBOX_RELAY_* variable they name is one `outbox-relay --help` lists
#    (and every OUTBOX_CONSUME_* one `outbox-consume --help` lists);
#  - `outbox-relay --check-config-offline` exits 0 with the environment of each
#    Kubernetes Deployment (values from secret.example.yaml, the password files
#    from the Secret volume written to a temp dir), of the compose relay, and
#    of the systemd unit + env.example; the password-file paths are inside a
#    mounted Secret volume that carries that key;
#  - every probe/scrape path they name (/healthz, /readyz, /metrics) is served
#    (200 or 503, never 404) by a running relay, on the port they name; a
#    standby relay answers /healthz 200, /readyz 503 and takes over when the
#    active one stops; the image's HEALTHCHECK probe (deploy/healthcheck.c)
#    builds and tells 200 from anything else;
#  - grace periods exceed the relay's shutdown timeout; the systemd unit's
#    RestartPreventExitStatus is exactly the permanent exit codes of
#    lib/exitcode.h; the image's uid is the one Kubernetes runs as;
#  - the Grafana dashboard is valid JSON and uses only metrics /metrics serves.
# The YAML checks need PyYAML; without it they are skipped (logged), the rest runs.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$TESTS_DIR/.." && pwd)
D=$ROOT/deploy
K8S_DEPLOYS=("$D/kubernetes/deployment.yaml" "$D/kubernetes/relay-deployment.yaml")
SECRET=$D/kubernetes/secret.example.yaml
COMPOSE=$D/compose/compose.yaml
UNIT=$D/systemd/outbox-relay.service
ENV_EXAMPLE=$D/systemd/env.example
DASH=$D/grafana/outbox-relay.json
for f in "${K8S_DEPLOYS[@]}" "$SECRET" "$COMPOSE" "$UNIT" "$ENV_EXAMPLE" "$DASH" "$D/Dockerfile" "$D/healthcheck.c"; do
	[ -f "$f" ] || fail "missing $f"
done
setup_tmp

# Manifest files whose OUTBOX_RELAY_* / OUTBOX_CONSUME_* names must exist.
mapfile -t MANIFESTS < <(ls "$D"/kubernetes/* "$D"/compose/*.yaml "$D"/compose/*Dockerfile "$D"/compose/*.sh \
	"$D"/systemd/* "$D"/redis/* "$D/Dockerfile" "$D/healthcheck.c" 2>/dev/null)

HAVE_YAML=0
if python3 -c 'import yaml' 2>/dev/null; then
	HAVE_YAML=1
else
	log "python3 has no PyYAML (Debian: python3-yaml): the YAML structure checks are skipped"
fi

# ---------------------------------------------------------------------------
# helper: reads the manifests (PyYAML)
# ---------------------------------------------------------------------------
cat >"$T/manifests.py" <<'PY'
import json, os, re, sys

def load_all(path):
    import yaml
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]

def die(msg):
    sys.stderr.write(msg + "\n")
    sys.exit(1)

def relay_container(dep):
    cs = dep["spec"]["template"]["spec"]["containers"]
    for c in cs:
        if c["name"] == "outbox-relay":
            return c
    die("%s: no container named outbox-relay" % dep["metadata"]["name"])

def deployments(path):
    ds = [d for d in load_all(path) if d.get("kind") == "Deployment"]
    if not ds:
        die("%s: no Deployment" % path)
    return ds

def cmd_k8s_env(path, secret_path, outdir):
    """NUL-separated NAME=VALUE of the relay container; password files written to outdir."""
    secrets = {d["metadata"]["name"]: d.get("stringData", {}) for d in load_all(secret_path) if d.get("kind") == "Secret"}
    out = []
    for dep in deployments(path):
        spec = dep["spec"]["template"]["spec"]
        c = relay_container(dep)
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = c.get("volumeMounts", [])
        for e in c.get("env", []):
            name = e["name"]
            if "value" in e:
                val = str(e["value"])
            else:
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if not ref:
                    die("%s: %s: only value and secretKeyRef are supported here" % (path, name))
                sec = secrets.get(ref["name"])
                if sec is None:
                    die("%s: %s refers to Secret %s, which secret.example.yaml does not define" % (path, name, ref["name"]))
                if ref["key"] not in sec:
                    die("%s: %s refers to key %s, missing from Secret %s" % (path, name, ref["key"], ref["name"]))
                val = str(sec[ref["key"]])
            if name.endswith("_PASSWORD_FILE"):
                # The file must come from a mounted Secret volume item.
                m = next((m for m in mounts if val.startswith(m["mountPath"].rstrip("/") + "/")), None)
                if not m:
                    die("%s: %s=%s is under no volumeMount of the relay container" % (path, name, val))
                v = vols.get(m["name"])
                if not v or "secret" not in v:
                    die("%s: %s: volume %s is not a Secret volume" % (path, name, m["name"]))
                rel = val[len(m["mountPath"].rstrip("/")) + 1:]
                items = v["secret"].get("items")
                key = rel
                if items is not None:
                    it = next((i for i in items if i["path"] == rel), None)
                    if not it:
                        die("%s: %s: Secret volume %s has no item with path %s" % (path, name, m["name"], rel))
                    key = it["key"]
                sec = secrets.get(v["secret"]["secretName"])
                if sec is None or key not in sec:
                    die("%s: %s: Secret %s has no key %s" % (path, name, v["secret"]["secretName"], key))
                f = os.path.join(outdir, dep["metadata"]["name"] + "." + key)
                with open(f, "w") as fh:
                    fh.write(str(sec[key]) + "\n")
                os.chmod(f, 0o600)
                val = f
            out.append("%s=%s" % (name, val))
    sys.stdout.write("\0".join(out) + "\0")

def cmd_k8s_facts(path):
    """One line per fact: KEY VALUE..."""
    for dep in deployments(path):
        n = dep["metadata"]["name"]
        spec = dep["spec"]["template"]["spec"]
        c = relay_container(dep)
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
        env = {e["name"]: str(e.get("value", "")) for e in c.get("env", [])}
        print("http_addr", n, env.get("OUTBOX_RELAY_HTTP_ADDR", ":9187"))
        print("shutdown", n, env.get("OUTBOX_RELAY_SHUTDOWN_TIMEOUT", "10s"))
        print("grace", n, spec.get("terminationGracePeriodSeconds", 30))
        sc = dict(spec.get("securityContext", {}))
        sc.update(c.get("securityContext", {}))
        print("run_as_user", n, sc.get("runAsUser", ""))
        print("read_only_root", n, sc.get("readOnlyRootFilesystem", False))
        print("run_as_non_root", n, sc.get("runAsNonRoot", False))
        print("drop_all", n, "ALL" in sc.get("capabilities", {}).get("drop", []))
        print("no_priv_esc", n, sc.get("allowPrivilegeEscalation", True) is False)
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            p = c.get(kind)
            if p and "httpGet" in p:
                port = p["httpGet"]["port"]
                port = ports.get(port, port)
                print("probe", n, kind, p["httpGet"]["path"], port)
        ann = dep["spec"]["template"]["metadata"].get("annotations", {})
        if "prometheus.io/path" in ann:
            print("probe", n, "scrape", ann["prometheus.io/path"], ann.get("prometheus.io/port", ""))

def cmd_compose_env(path, service):
    import yaml
    with open(path) as f:
        doc = yaml.safe_load(f)
    env = doc["services"][service].get("environment", {})
    if isinstance(env, list):
        env = dict(x.split("=", 1) for x in env)
    sys.stdout.write("\0".join("%s=%s" % (k, "" if v is None else v) for k, v in env.items()) + "\0")

def cmd_compose_facts(path):
    import yaml
    with open(path) as f:
        doc = yaml.safe_load(f)
    for name, s in doc["services"].items():
        print("service", name, s.get("stop_grace_period", "10s"),
              (s.get("environment") or {}).get("OUTBOX_RELAY_SHUTDOWN_TIMEOUT", "10s"))
        for sec in s.get("secrets", []):
            src = sec if isinstance(sec, str) else sec["source"]
            if src not in doc.get("secrets", {}):
                die("compose: service %s uses undefined secret %s" % (name, src))
        for dep, cond in (s.get("depends_on") or {}).items():
            if dep not in doc["services"]:
                die("compose: %s depends on unknown service %s" % (name, dep))
            c = cond.get("condition") if isinstance(cond, dict) else None
            if c == "service_healthy" and not (doc["services"][dep].get("healthcheck") or dep == "relay"):
                die("compose: %s waits for %s to be healthy, which has no healthcheck" % (name, dep))
    for name, sec in doc.get("secrets", {}).items():
        f = os.path.join(os.path.dirname(path), sec["file"])
        if not os.path.isfile(f):
            die("compose: secret %s: file %s does not exist" % (name, f))

def cmd_dash(path):
    """Metric names the dashboard queries, and problems (printed as 'problem ...')."""
    with open(path) as f:
        d = json.load(f)
    names, ids = set(), []
    defined = {v["name"] for v in d.get("templating", {}).get("list", [])}
    text = json.dumps(d)
    for var in set(re.findall(r"\$\{?([A-Za-z_]\w*)", text)):
        if not var.startswith("__") and var not in defined:
            print("problem undefined variable $%s" % var)
    def walk(ps):
        for p in ps:
            ids.append(p["id"])
            for t in p.get("targets", []):
                names.update(re.findall(r"\b(outbox_relay_\w+)", t["expr"]))
            walk(p.get("panels", []))
    walk(d["panels"])
    if len(ids) != len(set(ids)):
        print("problem duplicate panel ids")
    for n in sorted(names):
        print("metric", n)

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"k8s-env": cmd_k8s_env, "k8s-facts": cmd_k8s_facts, "compose-env": cmd_compose_env,
     "compose-facts": cmd_compose_facts, "dash": cmd_dash}[cmd](*args)
PY
M="python3 $T/manifests.py"

# duration_s 10s|500ms|2m|30 -> whole seconds (rounded up)
duration_s() {
	python3 -c '
import re, sys
m = re.fullmatch(r"(\d+)(ms|s|m|h)?", sys.argv[1].strip())
if not m:
    sys.exit("bad duration " + sys.argv[1])
n, u = int(m.group(1)), m.group(2) or "s"
print(-(-n * {"ms": 1, "s": 1000, "m": 60000, "h": 3600000}[u] // 1000))' "$1"
}

# ---------------------------------------------------------------------------
# 1. variable names
# ---------------------------------------------------------------------------
HELP=$("$RELAY_BIN" --help)
KNOWN=$(grep -oE 'OUTBOX_RELAY_[A-Z0-9][A-Z0-9_]*' <<<"$HELP" | sort -u)
[ "$(wc -l <<<"$KNOWN")" -ge 20 ] || fail "--help lists only $(wc -l <<<"$KNOWN") OUTBOX_RELAY_* variables?"
used=$(grep -ohE 'OUTBOX_RELAY_[A-Z0-9][A-Z0-9_]*' "${MANIFESTS[@]}" | sort -u)
[ -n "$used" ] || fail "the manifests name no OUTBOX_RELAY_* variable (test bug?)"
unknown=$(comm -23 <(echo "$used") <(echo "$KNOWN"))
[ -z "$unknown" ] || fail "variables in deploy/ that outbox-relay --help does not list: $(echo $unknown)" \
	"(in: $(grep -lE "$(echo $unknown | tr ' ' '|')" "${MANIFESTS[@]}" | sed "s|$ROOT/||" | tr '\n' ' '))"
ok "all $(wc -l <<<"$used") OUTBOX_RELAY_* variables named in deploy/ are listed by --help"

cused=$(grep -ohE 'OUTBOX_CONSUME_[A-Z0-9][A-Z0-9_]*' "${MANIFESTS[@]}" | sort -u || true)
if [ -n "$cused" ]; then
	if [ -x "$CONSUME_BIN" ]; then
		cknown=$("$CONSUME_BIN" --help | grep -oE 'OUTBOX_CONSUME_[A-Z0-9][A-Z0-9_]*' | sort -u)
		cunknown=$(comm -23 <(echo "$cused") <(echo "$cknown"))
		[ -z "$cunknown" ] || fail "variables in deploy/ that outbox-consume --help does not list: $(echo $cunknown)"
		ok "all $(wc -l <<<"$cused") OUTBOX_CONSUME_* variables named in deploy/ are listed by outbox-consume --help"
	else
		log "no outbox-consume binary at $CONSUME_BIN: OUTBOX_CONSUME_* names not checked"
	fi
fi

# ---------------------------------------------------------------------------
# 2. --check-config with each manifest's environment
# ---------------------------------------------------------------------------
# check_config WHAT NAME=VALUE...: a clean environment plus these variables.
check_config() {
	local what=$1 out rc=0
	shift
	out=$(env -i PATH="$PATH" "$@" "$RELAY_BIN" --check-config-offline 2>&1) || rc=$?
	[ "$rc" = 0 ] || fail "$what: outbox-relay --check-config-offline exited $rc: $out"
	assert_contains "$out" "configuration OK" "$what: --check-config-offline accepts the environment"
}

if [ "$HAVE_YAML" = 1 ]; then
	for dep in "${K8S_DEPLOYS[@]}"; do
		mkdir -p "$T/k8s"
		$M k8s-env "$dep" "$SECRET" "$T/k8s" >"$T/env.bin" || fail "$(basename "$dep"): cannot build the environment"
		mapfile -d '' -t envs <"$T/env.bin"
		[ "${#envs[@]}" -ge 4 ] || fail "$(basename "$dep"): only ${#envs[@]} env entries"
		check_config "$(basename "$dep")" "${envs[@]}"
		# The password files came from the Secret volume and hold the example values.
		for e in "${envs[@]}"; do
			case "$e" in
			OUTBOX_RELAY_PG_PASSWORD_FILE=* | OUTBOX_RELAY_REDIS_PASSWORD_FILE=*)
				[ -s "${e#*=}" ] || fail "$(basename "$dep"): ${e%%=*} file is empty"
				;;
			esac
		done
		$M k8s-facts "$dep" >"$T/facts" || fail "$(basename "$dep"): cannot read the Deployment"
		while read -r key name a _; do
			case "$key" in
			grace) grace=$a ;;
			shutdown) shutdown=$(duration_s "$a") ;;
			run_as_user) assert_eq 10001 "$a" "$name: runAsUser is the image's uid (USER 10001)" ;;
			read_only_root | run_as_non_root | drop_all | no_priv_esc) assert_eq True "$a" "$name: securityContext $key" ;;
			esac
		done <"$T/facts"
		assert_lt "$shutdown" "$grace" "$(basename "$dep"): OUTBOX_RELAY_SHUTDOWN_TIMEOUT < terminationGracePeriodSeconds"
	done

	$M compose-env "$COMPOSE" relay >"$T/env.bin" || fail "compose.yaml: cannot read the relay's environment"
	mapfile -d '' -t envs <"$T/env.bin"
	# Its password file is a compose secret: point it at the checked-in file.
	for i in "${!envs[@]}"; do
		case "${envs[$i]}" in
		OUTBOX_RELAY_PG_PASSWORD_FILE=/run/secrets/*)
			envs[$i]="OUTBOX_RELAY_PG_PASSWORD_FILE=$D/compose/secrets/${envs[$i]##*/}"
			[ -s "${envs[$i]#*=}" ] || fail "compose.yaml: secret file ${envs[$i]#*=} missing"
			;;
		esac
	done
	check_config "compose.yaml relay" "${envs[@]}"
	$M compose-facts "$COMPOSE" >"$T/cfacts" || fail "compose.yaml: inconsistent (see above)"
	while read -r key name grace shutdown; do
		[ "$name" = relay ] || continue
		assert_lt "$(duration_s "$shutdown")" "$(duration_s "$grace")" "compose.yaml relay: shutdown timeout < stop_grace_period"
	done <"$T/cfacts"
else
	log "skipped: Kubernetes and compose environments (no PyYAML)"
fi

# systemd: EnvironmentFile (env.example) + Environment= lines, %d = credentials dir.
mkdir -p "$T/creds"
echo pg-secret >"$T/creds/pg-password"
echo redis-secret >"$T/creds/redis-password"
envs=()
while IFS= read -r line; do
	case "$line" in
	Environment=*)
		# Environment=A=1 B=2 (no quoted values in our unit)
		for kv in ${line#Environment=}; do envs+=("${kv//%d/$T/creds}"); done
		;;
	esac
done <"$UNIT"
while IFS= read -r line; do
	case "$line" in '#'* | '') continue ;; esac
	envs+=("$line")
done <"$ENV_EXAMPLE"
check_config "systemd unit + env.example" "${envs[@]}"
grep -q '^EnvironmentFile=/etc/outbox-relay/env$' "$UNIT" || fail "unit: EnvironmentFile is not /etc/outbox-relay/env"
stop=$(sed -n 's/^TimeoutStopSec=//p' "$UNIT")
assert_lt 10 "$(duration_s "$stop")" "systemd: TimeoutStopSec ($stop) > default shutdown timeout (10s)"
# RestartPreventExitStatus = the permanent codes of lib/exitcode.h (all but 0 and 1).
codes=$(sed -n 's/^[[:space:]]*EXIT_[A-Z_]*[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' "$ROOT/lib/exitcode.h" |
	awk '$1 >= 2' | sort -n | tr '\n' ' ' | sed 's/ $//')
[ -n "$codes" ] || fail "no exit codes found in lib/exitcode.h"
assert_eq "$codes" "$(sed -n 's/^RestartPreventExitStatus=//p' "$UNIT" | tr ' ' '\n' | sort -n | tr '\n' ' ' | sed 's/ $//')" \
	"systemd: RestartPreventExitStatus = the permanent exit codes of lib/exitcode.h"
if command -v systemd-analyze >/dev/null 2>&1; then
	sed "s|^ExecStart=.*|ExecStart=$RELAY_BIN|" "$UNIT" >"$T/outbox-relay.service"
	out=$(systemd-analyze verify "$T/outbox-relay.service" 2>&1) || fail "systemd-analyze verify: $out"
	assert_eq "" "$(grep -v 'Failed to .*/etc/outbox-relay\|^$' <<<"$out" || true)" "systemd-analyze verify reports nothing"
else
	log "no systemd-analyze: unit syntax not verified"
fi

# Dockerfile: exec-form entrypoint, numeric non-root user, HEALTHCHECK through the probe.
assert_match "$(cat "$D/Dockerfile")" '^ENTRYPOINT \["/usr/local/bin/outbox-relay"\]$' "Dockerfile: exec-form ENTRYPOINT"
assert_match "$(cat "$D/Dockerfile")" '^USER 10001:10001$' "Dockerfile: numeric non-root USER"
assert_match "$(cat "$D/Dockerfile")" '^EXPOSE 9187$' "Dockerfile: EXPOSE 9187"
assert_contains "$HELP" "(default: :9187)" "the relay's default --http-addr is :9187 (what EXPOSE and the probes use)"
if grep -qE '^(CMD|ENV) .*OUTBOX_RELAY_' "$D/Dockerfile"; then
	fail "Dockerfile: configuration belongs in OUTBOX_RELAY_* at run time, not baked into the image"
fi

# ---------------------------------------------------------------------------
# 3. the paths the manifests probe are served
# ---------------------------------------------------------------------------
pg_start
load_schema
redis_start

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# http_status PORT PATH -> the status code (000 when no answer)
http_status() {
	python3 - "$1" "$2" <<-'PY'
		import sys, urllib.request, urllib.error
		try:
		    r = urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=5)
		    print(r.status)
		except urllib.error.HTTPError as e:
		    print(e.code)
		except Exception:
		    print("000")
	PY
}
http_body() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=5).read().decode())' "$1" "$2"; }

PORT_A=$(free_port)
relay_start --slot manifests --http-addr "127.0.0.1:$PORT_A"
PID_A=$RELAY_PID
wait_for "slot_active manifests" 30 || fail "relay A does not stream"
wait_for "[ \"\$(http_status $PORT_A /readyz)\" = 200 ]" 15 || fail "relay A: /readyz is $(http_status "$PORT_A" /readyz), not 200, while streaming"

# Every path named in the manifests, plus the three the relay documents.
paths=$( (grep -ohE '/(healthz|readyz|metrics)\b' "${MANIFESTS[@]}" || true; printf '%s\n' /healthz /readyz /metrics) | sort -u)
if [ "$HAVE_YAML" = 1 ]; then
	for dep in "${K8S_DEPLOYS[@]}"; do
		$M k8s-facts "$dep" >"$T/facts"
		http_addr=$(awk '$1 == "http_addr" {print $3; exit}' "$T/facts")
		while read -r key name kind path port; do
			[ "$key" = probe ] || continue
			assert_eq "${http_addr##*:}" "$port" "$name $kind: port $port is the relay's OUTBOX_RELAY_HTTP_ADDR port"
			paths=$(printf '%s\n%s\n' "$paths" "$path" | sort -u)
		done <"$T/facts"
	done
fi
paths=$(printf '%s\n%s\n' "$paths" "$(sed -n 's/^HEALTHCHECK.*CMD \[.*"\(\/[a-z]*\)"\]$/\1/p; s/^ *CMD \[.*"\(\/[a-z]*\)"\]$/\1/p' "$D/Dockerfile")" | grep . | sort -u)
for p in $paths; do
	st=$(http_status "$PORT_A" "$p")
	case "$st" in
	200 | 503) ok "GET $p on the streaming relay: $st" ;;
	*) fail "GET $p (named in deploy/) answers $st on the relay, not 200/503" ;;
	esac
done
assert_eq 404 "$(http_status "$PORT_A" /no-such-path)" "an unknown path is 404 (the check above can fail)"

# A second relay on the same slot: standby. Alive, not ready.
PORT_B=$(free_port)
relay_start --slot manifests --http-addr "127.0.0.1:$PORT_B"
wait_for "http_body $PORT_B /metrics | grep -q 'state=\"standby\"} 1'" 20 ||
	fail "relay B is not standby: $(http_body "$PORT_B" /metrics | grep 'outbox_relay_state' | tr '\n' ' ')"
assert_eq 200 "$(http_status "$PORT_B" /healthz)" "standby relay: /healthz 200 (alive)"
assert_eq 503 "$(http_status "$PORT_B" /readyz)" "standby relay: /readyz 503 (not streaming)"
assert_eq 200 "$(http_status "$PORT_A" /readyz)" "active relay: /readyz 200"

# The image's HEALTHCHECK probe, built as the Dockerfile builds it.
PROBE=$T/outbox-relay-healthcheck
if cc -static -Os -s -std=c11 -Wall -Wextra -Werror -o "$PROBE" "$D/healthcheck.c" 2>"$T/cc.log"; then
	ok "deploy/healthcheck.c builds statically with -Wall -Wextra -Werror"
else
	cat "$T/cc.log" >&2
	cc -Os -std=c11 -Wall -Wextra -Werror -o "$PROBE" "$D/healthcheck.c" || fail "deploy/healthcheck.c does not build"
	log "no static libc here; probe built dynamically"
fi
probe() { OUTBOX_RELAY_HTTP_ADDR=$1 "$PROBE" "${@:2}" >/dev/null 2>&1; }
probe "127.0.0.1:$PORT_A" || fail "probe: exit $? for the healthy relay at 127.0.0.1:$PORT_A"
ok "probe (default /healthz): exit 0 for a healthy relay"
probe ":$PORT_A" || fail "probe: ':PORT' (wildcard host) does not reach the relay on loopback"
ok "probe: ':PORT' form reaches the relay"
! probe "127.0.0.1:$PORT_B" /readyz || fail "probe /readyz: exit 0 for a standby relay (503)"
ok "probe /readyz: non-zero for a standby relay (503)"
! probe "127.0.0.1:$PORT_A" /no-such-path || fail "probe: exit 0 for a 404"
ok "probe: non-zero for a 404"
! probe "127.0.0.1:$(free_port)" || fail "probe: exit 0 with nothing listening"
ok "probe: non-zero with nothing listening"
! probe "" || fail "probe: exit 0 with OUTBOX_RELAY_HTTP_ADDR empty (endpoint off)"
ok "probe: non-zero when the endpoint is off"

# Takeover: stop the active relay; the standby streams within seconds.
t0=$(date +%s%N)
kill -TERM "$PID_A"
wait_for "[ \"\$(http_status $PORT_B /readyz)\" = 200 ]" 20 || fail "standby did not take over within 20 s"
ms=$((($(date +%s%N) - t0) / 1000000))
assert_lt "$ms" 10000 "standby took over ($ms ms after SIGTERM to the active relay)"

# ---------------------------------------------------------------------------
# 4. the Grafana dashboard
# ---------------------------------------------------------------------------
python3 -m json.tool "$DASH" >/dev/null || fail "$DASH is not valid JSON"
ok "grafana dashboard is valid JSON"
$M dash "$DASH" >"$T/dash" || fail "cannot read the dashboard"
problems=$(sed -n 's/^problem //p' "$T/dash")
[ -z "$problems" ] || fail "dashboard: $problems"
http_body "$PORT_B" /metrics >"$T/metrics"
served=$(sed -n 's/^# TYPE \([a-z_]*\) \(counter\|gauge\|histogram\|summary\|untyped\)$/\1 \2/p' "$T/metrics" |
	while read -r n t; do
		echo "$n"
		[ "$t" = histogram ] && printf '%s\n' "${n}_bucket" "${n}_sum" "${n}_count"
		true
	done | sort -u)
missing=$(comm -23 <(sed -n 's/^metric //p' "$T/dash" | sort -u) <(echo "$served"))
[ -z "$missing" ] || fail "the dashboard queries metrics /metrics does not serve: $(echo $missing)"
ok "the dashboard's $(grep -c '^metric ' "$T/dash") metrics are all served by /metrics"
assert_eq 0 "$(grep '^outbox_relay_' "$T/metrics" | grep -vc 'slot="manifests"' || true)" \
	"every series on /metrics carries slot=\"manifests\""

relay_stop
pass
