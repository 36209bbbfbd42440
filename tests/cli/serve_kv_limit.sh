#!/bin/bash
# serve_kv_limit.sh — `serve --parallel N --kv-limit MB`: accepted, reported in /metrics (demotion counters), bad values rejected.
# (The demotion itself — a waiting session's KV demoted and restored — is asserted through serve by tests/test_server.c,
# and with identical output by tests/test_sched.c and tests/cli/bench_agents.sh.)
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/serve_kv_limit.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 77; }
mkdir -p "$TMP"
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT
unset REPRISE_API_KEY
. "$(dirname "$0")/lib/common.sh"

for v in -1 x; do
  "$BIN" serve -m "$M" --parallel 2 --kv-limit "$v" --port 0 >/dev/null 2>"$TMP/e"; rc=$?
  [ $rc -eq 2 ] && grep -q -- "--kv-limit" "$TMP/e" && ok "--kv-limit $v rejected" || bad "--kv-limit $v rejected (rc $rc)"
done

"$BIN" serve -m "$M" --parallel 2 --kv-limit 0.5 --port 0 --port-file "$TMP/port" --quiet -t 1 2>"$TMP/serve.log" &
SP=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; kill -0 "$SP" 2>/dev/null || break; sleep 0.1; done
[ -s "$TMP/port" ] && ok "serve --parallel 2 --kv-limit 0.5 starts" || { bad "serve starts"; cat "$TMP/serve.log"; }
port=$(cat "$TMP/port" 2>/dev/null)
curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' > "$TMP/r.json"
grep -q '"text"' "$TMP/r.json" && ok "a completion is served" || bad "a completion is served ($(head -c 300 "$TMP/r.json"))"
curl -s -m 10 "http://127.0.0.1:$port/metrics" > "$TMP/m.txt"
grep -q '^reprise_kv_demotions_total 0$' "$TMP/m.txt" && grep -q '^reprise_kv_restores_total 0$' "$TMP/m.txt" &&
  ok "/metrics reports demotions and restores" || bad "/metrics reports demotions and restores"
kill "$SP"; wait "$SP" 2>/dev/null; SP=""
finish
