#!/bin/bash
# bench_agents.sh — `reprise bench agents` on stories260K: every policy equals the one-at-a-time greedy reference, and a tiny --kv-limit demotes and restores waiting sessions without changing any output.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/bench_agents.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: no $M (set RP_SHARED_DIR)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed (checks the JSON)"; exit 77; }
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

"$BIN" bench agents --help > "$TMP/usage"
check "usage names the uniform policy and --kv-limit" 'grep -q uniform "$TMP/usage" && grep -q -- "--kv-limit" "$TMP/usage"'
"$BIN" bench agents -m "$M" --policy hal,bogus >/dev/null 2>"$TMP/e"; rc=$?
check "unknown policy exits 2 naming it" '[ $rc -eq 2 ] && grep -q "bogus" "$TMP/e"'

# 2 and 3 agents, 2 turns, stalls 0.1-1 s (virtual time), every policy, 1 byte of KV allowed: every waiting session is demoted
"$BIN" bench agents -m "$M" -t 1 --drafter self:2 --agents 2,3 --stall 0.1:1 --turns 2 --kv-limit 0.000001 \
  --json-out "$TMP/a.json" >"$TMP/out" 2>"$TMP/err"
rc=$?
check "runs and exits 0" '[ $rc -eq 0 ]'
[ $rc -eq 0 ] || { sed 's/^/    /' "$TMP/err" | tail -20; }
check "progress per run on stderr" 'grep -q "run 12/12: hal-yield N=3 stall 0.1:1" "$TMP/err"'
check "table has the same-as-sequential and demotion columns" 'grep -q "same seq" "$TMP/out" && grep -q "dem/res" "$TMP/out"'
python3 - "$TMP/a.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
bad = 0
def t(name, cond):
    global bad
    print(("ok   " if cond else "FAIL ") + name)
    bad += not cond
t("12 runs, six policies incl. uniform", len(runs) == 12 and
  sorted({r["policy"] for r in runs}) == ["batch-ar", "batch-sd", "hal", "hal-yield", "seq-sd", "uniform"])
t("every policy equals the sequential reference, every agent",
  all(r["same_as_sequential"] is True and all(a["same_as_sequential"] for a in r["per_agent"]) for r in runs))
t("waiting sessions demoted under the tiny limit", all(r["demotions"] > 0 for r in runs))
t("every demotion restored on resume", all(r["restores"] == r["demotions"] for r in runs))
t("nothing failed", not any(r["failed"] for r in runs))
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] && ok "json checks" || bad "json checks"
# per-kind temperatures: a sampling reasoning agent beside greedy workers. Against the same trace all
# greedy, the workers' outputs are unchanged and the reasoning agent's differ; bad forms rejected.
for tp in 1,0,0 0; do
  "$BIN" bench agents -m "$M" --agents 3 --stall 0 --turns 2 --gen 8,8,8 --prompt 32,32,32 --result 8 \
    --policy uniform,hal --clock cpu -t 1 --temp $tp --json > "$TMP/t$tp.json" 2>/dev/null
done
python3 - "$TMP/t1,0,0.json" "$TMP/t0.json" <<'PY' && ok "--temp 1,0,0 samples only the reasoning agent" || bad "--temp 1,0,0 samples only the reasoning agent"
import json, sys
mixed, greedy = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ok = len(mixed) == 2 and len(greedy) == 2 and not any(r["failed"] for r in mixed + greedy)
for rm, rg in zip(mixed, greedy):
    ok = ok and rm["same_as_sequential"] is None and rg["same_as_sequential"] is True
    for am, ag in zip(rm["per_agent"], rg["per_agent"]):
        ok = ok and am["kind"] == ag["kind"]
        ok = ok and ((am["hash"] != ag["hash"]) if am["kind"] == "reasoning" else (am["hash"] == ag["hash"]))
sys.exit(0 if ok else 1)
PY
for t in 1,2 x -1 1,0,0,0; do
  "$BIN" bench agents -m "$M" --temp "$t" >/dev/null 2>"$TMP/e"; rc=$?
  [ $rc -eq 2 ] && grep -q -- "--temp" "$TMP/e" && ok "--temp $t rejected" || bad "--temp $t rejected"
done
finish
