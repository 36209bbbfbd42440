#!/bin/bash
# bench_all.sh — `reprise bench all --quick` on stories260K: every step runs, leaves its JSON / HTML, and the joined report embeds them.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/bench_all.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
[ -d "$SHARED/data" ] || { echo "SKIP: $SHARED/data not found (the doc QA / chat / skills workloads read it)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed (checks the JSON)"; exit 77; }
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
export XDG_CACHE_HOME="$TMP/xdg"   # no stored calibration from another run
. "$(dirname "$0")/lib/common.sh"

"$BIN" bench all --help > "$TMP/usage"
check "usage lists the steps" 'for s in reuse workloads fidelity sweep ablation agents; do grep -q "^  $s " "$TMP/usage" || exit 1; done'
check "usage names the experiments it does not run" 'grep -q "^Not run: the EdgeAgent paper.s section 4.3" "$TMP/usage" && grep -q "no GPU backend yet" "$TMP/usage"'
# sanitizer builds (CMake sets RP_SANITIZED=1) run the same steps and checks on one query and 3 passages per prompt
SMALL=()
[ "${RP_SANITIZED:-0}" = 1 ] && SMALL=(--queries 1 --docs 3)
"$BIN" bench all >/dev/null 2>"$TMP/e"; rc=$?
check "no model exits 2" '[ $rc -eq 2 ] && grep -q "\-m MODEL" "$TMP/e"'

"$BIN" bench all --quick "${SMALL[@]}" -m "$M" --fidelity-model "$M" -t 1 --out "$TMP/r" > "$TMP/out" 2> "$TMP/err"
rc=$?
check "runs every step and exits 0" '[ $rc -eq 0 ]'
[ $rc -eq 0 ] || { tr '\r' '\n' < "$TMP/err" | grep -v "query" | tail -20 | sed 's/^/    /'; }
check "progress names each step" 'for i in 1 2 3 4 5 6 7 8 9 10; do grep -q "^\[$i/10\] bench" "$TMP/err" || exit 1; done'
for f in reuse-synthetic reuse-docqa reuse-chat reuse-skills fidelity-docqa fidelity-chat fidelity-skills sweep ablation agents; do
  check "$f.json parses" "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' '$TMP/r/$f.json'"
  check "$f.html written" "[ -s '$TMP/r/$f.html' ]"
done
check "agents timeline written" '[ -s "$TMP/r/agents.svg" ]'
check "report joins the sub-reports and their charts" \
  'R="$TMP/r/report.html"; [ -s "$R" ] && [ "$(grep -c "<svg" "$R")" -ge 12 ] && grep -q "ablation" "$R" && ! grep -q "(missing" "$R"'
check "report says which experiments it leaves out" 'grep -q "Not in this report: the EdgeAgent paper.*section 4.3" "$TMP/r/report.html"'
check "fidelity is scored against the exact run (prefix reuse: KL at rounding level)" \
  "python3 - '$TMP/r/fidelity-docqa.json' <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m = {x['mode']: x for x in d['modes']}
assert m['prefix']['kl_mean'] < 1e-6 and m['prefix']['greedy_agreement'] == 1, m['prefix']
assert m['blend']['scored_steps'] > 0 and 0 <= m['blend']['kl_mean'] < 1, m['blend']
assert m['blend']['kl_mean'] <= m['full']['kl_mean'] + 1e-9, (m['blend'], m['full'])
PY"
check "agents step drafts with the fidelity model's q8_0 sibling, as in RESULTS" \
  'grep "bench agents" "$TMP/err" | grep -q -- "--drafter model:.*stories260K-q8_0.gguf"'
"$BIN" bench all --join --out "$TMP/r" > /dev/null 2> "$TMP/join.err"; rc=$?
check "--join without --fidelity-model still embeds the fidelity pages" \
  '[ $rc -eq 0 ] && [ "$(grep -c "Reprise reuse benchmark: docqa workload" "$TMP/r/report.html")" -eq 2 ]'
"$BIN" bench all --quick -m "$M" --out "$TMP/p" --steps peer --peer --peer-dir "$TMP/nopeer" > /dev/null 2> "$TMP/peer.err"; rc=$?
check "--peer without node-llama-cpp is skipped with a message" \
  '[ $rc -eq 0 ] && grep -q "skipping the llama.cpp peer step" "$TMP/peer.err"'
finish
