#!/bin/bash
# reuse_cli.sh — end-to-end checks of the KV-reuse CLI: run --segments/--reuse/--recompute-ratio/--static/--cache-dir, plan, bad input.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/reuse_cli.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

M="$SHARED/models/stories260K.gguf"
if [ ! -f "$M" ]; then
  echo "SKIP reuse CLI checks: $M not found"
  echo "0 passed, 0 failed, 1 skipped"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP reuse CLI checks: python3 (parses the stats line) not found"
  echo "0 passed, 0 failed, 1 skipped"
  exit 77
fi

# jcheck FILE EXPR: EXPR (Python, over the dict s) holds for the last `stats: {json}` line of FILE
jcheck() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("stats: ")]
s = json.loads(lines[-1][len("stats: "):]) if lines else {}
sys.exit(0 if lines and eval(sys.argv[2]) else 1)
EOF
}
# the stats line must be the last stderr line
last_is_stats() { tail -n 1 "$1" | grep -q '^stats: {'; }

# a shared system segment (becomes the exact prefix), three documents, a question
SYS="You are a story teller. Read the stories and answer the question at the end."
D1="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her big red ball."
D2="One day, a small dog named Max found a shiny stick near the pond. He ran home to show his friend the stick."
D3="Tom and Sue went to the beach. They built a big sand castle and saw a crab. The crab was happy and sunny."
python3 - "$TMP" "$SYS" "$D1" "$D2" "$D3" <<'EOF'
import json, sys
d, sys_, d1, d2, d3 = sys.argv[1:]
json.dump([sys_, d1, d2, d3, " Who is Lily?"], open(d + "/A.json", "w"))
json.dump([sys_, d3, d1, d2, " Who found the stick?"], open(d + "/B.json", "w"))
json.dump({"not": "an array"}, open(d + "/obj.json", "w"))
json.dump(["fine", 3], open(d + "/num.json", "w"))
open(d + "/broken.json", "w").write('["unterminated')
EOF

RUN=("$BIN" run -m "$M" -n 4 --temp 0)
# seed DIR: the first request (A) into a fresh cache dir
seed() { rm -rf "$1"; "${RUN[@]}" --segments "$TMP/A.json" --cache-dir "$1" >/dev/null 2>"$1.seed.err"; }

# first request: nothing cached
seed "$TMP/c0"; rc=$?
check "seed run exits 0, stats line last" '[ $rc -eq 0 ] && last_is_stats "$TMP/c0.seed.err"'
check "seed run reuses nothing" '[ "$(stats_of "$TMP/c0.seed.err" reused_prefix)" = 0 ] && [ "$(stats_of "$TMP/c0.seed.err" reused_nonprefix)" = 0 ]'

# blend (default, r = 0.25) on the reordered documents
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c0" >/dev/null 2>"$TMP/blend.err"; rc=$?
np=$(stats_of "$TMP/blend.err" reused_nonprefix); pf=$(stats_of "$TMP/blend.err" reused_prefix)
rc_=$(stats_of "$TMP/blend.err" recomputed); ttft=$(stats_of "$TMP/blend.err" ttft_ms); pt=$(stats_of "$TMP/blend.err" prompt_tokens)
echo "     blend: prompt $pt, prefix $pf, non-prefix $np, recomputed $rc_, ttft $ttft ms"
check "blend run exits 0, stats line last" '[ $rc -eq 0 ] && last_is_stats "$TMP/blend.err"'
check "blend reuses the reordered documents (non-prefix > 0)" '[ -n "$np" ] && [ "$np" -gt 0 ]'
check "blend reuses the system segment as prefix" '[ -n "$pf" ] && [ "$pf" -gt 0 ]'
# one window (the prompt is under n_batch), final token new: recomputed = ceil(0.25 * non-prefix)
check "blend recomputes ceil(r * reused) tokens" '[ "$rc_" = "$(python3 -c "import math; print(math.ceil(0.25 * $np))")" ]'
check "TTFT is reported" 'python3 -c "import sys; sys.exit(0 if float(\"$ttft\") > 0 else 1)"'

seed "$TMP/c1"
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c1" --recompute-ratio 0.5 >/dev/null 2>"$TMP/r05.err"
np5=$(stats_of "$TMP/r05.err" reused_nonprefix); rc5=$(stats_of "$TMP/r05.err" recomputed)
check "--recompute-ratio 0.5 recomputes ceil(0.5 * reused)" '[ "$np5" = "$np" ] && [ "$rc5" = "$(python3 -c "import math; print(math.ceil(0.5 * $np5))")" ]'

seed "$TMP/c2"
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c2" --recompute-ratio 1 >/dev/null 2>"$TMP/r1.err"
check "--recompute-ratio 1 recomputes every reused token" '[ "$(stats_of "$TMP/r1.err" recomputed)" = "$np" ] && [ "$np" -gt 0 ]'

seed "$TMP/c3"
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c3" --reuse none >/dev/null 2>"$TMP/none.err"; rc=$?
check "--reuse none reports 0 reused" '[ $rc -eq 0 ] && [ "$(stats_of "$TMP/none.err" reused_prefix)" = 0 ] && [ "$(stats_of "$TMP/none.err" reused_nonprefix)" = 0 ] && [ "$(stats_of "$TMP/none.err" new)" = "$pt" ]'

seed "$TMP/c4"
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c4" --reuse prefix >/dev/null 2>"$TMP/prefix.err"; rc=$?
check "--reuse prefix reuses only the prefix" '[ $rc -eq 0 ] && [ "$(stats_of "$TMP/prefix.err" reused_prefix)" = "$pf" ] && [ "$(stats_of "$TMP/prefix.err" reused_nonprefix)" = 0 ] && [ "$(stats_of "$TMP/prefix.err" recomputed)" = 0 ]'

seed "$TMP/c5"
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c5" --reuse full >/dev/null 2>"$TMP/full.err"; rc=$?
check "--reuse full reuses without recompute" '[ $rc -eq 0 ] && [ "$(stats_of "$TMP/full.err" reused_nonprefix)" = "$np" ] && [ "$(stats_of "$TMP/full.err" recomputed)" = 0 ]'

# static shapes: fixed-size calls, padding reported; same reuse as dynamic
seed "$TMP/c6"
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c6" --static >/dev/null 2>"$TMP/static.err"; rc=$?
check "--static runs, reports pad rows and calls" '[ $rc -eq 0 ] && [ "$(stats_of "$TMP/static.err" pad_rows)" -gt 0 ] && [ "$(stats_of "$TMP/static.err" calls)" -gt 0 ] && [ "$(stats_of "$TMP/static.err" reused_nonprefix)" = "$np" ]'
# no calibration in c6: stderr says the shapes are defaults, and no placeholder latency is printed as if measured
check "--static without a calibration warns (default shapes, placeholder plan_ms, how to calibrate)" \
  'grep -q "static mode: no calibration for this model/machine (2 threads), call shapes L_P=128 L_S=512 are defaults" "$TMP/static.err" && grep -q "plan_ms) is a placeholder" "$TMP/static.err" && grep -q "reprise plan -m $M --calibrate -t 2 --cache-dir $TMP/c6" "$TMP/static.err"'
check "--static without a calibration: plan_ms null, calibrated false" \
  'jcheck "$TMP/static.err" "s[\"plan_ms\"] is None and s[\"calibrated\"] is False"'
check "a dynamic run has no plan: plan_ms null, no calibrated field" \
  'jcheck "$TMP/blend.err" "s[\"plan_ms\"] is None and \"calibrated\" not in s" && ! grep -q "static mode" "$TMP/blend.err"'
seed "$TMP/c7"
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/c7" --static --reuse full >/dev/null 2>"$TMP/sfull.err"; rc=$?
check "--static --reuse full is static (padded calls), no recompute" '[ $rc -eq 0 ] && [ "$(stats_of "$TMP/sfull.err" pad_rows)" -gt 0 ] && [ "$(stats_of "$TMP/sfull.err" recomputed)" = 0 ]'

# plan: segments and both schedules against a seeded cache (read-only: plan writes nothing)
seed "$TMP/c8"
"$BIN" plan -m "$M" --segments "$TMP/B.json" --cache-dir "$TMP/c8" >"$TMP/plan.out" 2>"$TMP/plan.err"; rc=$?
check "plan prints chunks, segments and both plans" '[ $rc -eq 0 ] && grep -q "^segments:" "$TMP/plan.out" && grep -q "reused (re-rotated)" "$TMP/plan.out" && grep -q "static plan, DP scheduler" "$TMP/plan.out" && grep -q "static plan, naive" "$TMP/plan.out"'
# --show-tokens: the same selection as the blend run above (same cache state, same prompt)
"$BIN" plan -m "$M" --segments "$TMP/B.json" --cache-dir "$TMP/c8" --show-tokens >"$TMP/plans.out" 2>"$TMP/plans.err"; rc=$?
check "plan --show-tokens lists the recomputed reused tokens, as many as run recomputes" '[ $rc -eq 0 ] && grep -q "^recomputed reused tokens (dynamic blend, check layer 1): $rc_ of $np\$" "$TMP/plans.out" && [ "$(grep -c "^  chunk " "$TMP/plans.out")" -ge 3 ]'
"$BIN" plan -m "$M" --segments "$TMP/B.json" --reuse prefix --show-tokens >/dev/null 2>"$TMP/e"; rc=$?
check "plan --show-tokens with --reuse prefix is a clear error" '[ $rc -eq 1 ] && grep -q "show-tokens needs --reuse blend" "$TMP/e"'
"$BIN" plan -m "$M" --segments "$TMP/A.json" >"$TMP/plan2.out" 2>/dev/null; rc=$?
check "plan without a cache: every chunk new" '[ $rc -eq 0 ] && grep -q "^segments:" "$TMP/plan2.out" && ! grep -q "reused (re-rotated)" "$TMP/plan2.out"'

# plan matches caches written with another KV type only with the same --kv-type (the salt includes it)
rm -rf "$TMP/cq"; "${RUN[@]}" --segments "$TMP/A.json" --cache-dir "$TMP/cq" --kv-type q8_0 >/dev/null 2>&1
"$BIN" plan -m "$M" --segments "$TMP/B.json" --cache-dir "$TMP/cq" --kv-type q8_0 --check-layer 2 >"$TMP/pq.out" 2>/dev/null; rc=$?
check "plan --kv-type q8_0 finds a q8_0 cache, prints the check layer" '[ $rc -eq 0 ] && grep -q "reused (re-rotated)" "$TMP/pq.out" && grep -q "check layer 2, KV q8_0" "$TMP/pq.out"'
"$BIN" plan -m "$M" --segments "$TMP/B.json" --cache-dir "$TMP/cq" >"$TMP/pf.out" 2>/dev/null
check "plan with the default f16 does not match it" 'grep -q "^segments:" "$TMP/pf.out" && ! grep -q "reused (re-rotated)" "$TMP/pf.out"'
"$BIN" plan -m "$M" --segments "$TMP/B.json" --kv-type q4_0 >/dev/null 2>"$TMP/e"; rc=$?
check "plan: unsupported --kv-type rejected" '[ $rc -eq 2 ] && grep -q "kv-type must be f16, q8_0 or f32" "$TMP/e"'

# calibration: one file per model + machine + thread count, each found by its own thread count
"$BIN" plan -m "$M" --calibrate --cache-dir "$TMP/cal" -t 1 >"$TMP/cal1.out" 2>&1; rc1=$?
"$BIN" plan -m "$M" --calibrate --cache-dir "$TMP/cal" -t 2 >"$TMP/cal2.out" 2>&1; rc2=$?
check "calibrating with -t 1 and -t 2 keeps two files" '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(ls "$TMP/cal" | grep -c "^calib-.*\.txt$")" -eq 2 ]'
"$BIN" plan -m "$M" --segments "$TMP/A.json" --cache-dir "$TMP/cal" -t 1 >/dev/null 2>"$TMP/e1"
"$BIN" plan -m "$M" --segments "$TMP/A.json" --cache-dir "$TMP/cal" -t 3 >/dev/null 2>"$TMP/e3"
check "plan uses the calibration of its thread count only" 'grep -q "using the calibration stored" "$TMP/e1" && grep -q "no calibration for this model" "$TMP/e3"'
"$BIN" plan -m "$M" --segments "$TMP/A.json" --cache-dir "$TMP/cal" -t 1 >"$TMP/o1" 2>/dev/null
"$BIN" plan -m "$M" --segments "$TMP/A.json" --cache-dir "$TMP/cal" -t 3 >"$TMP/o3" 2>/dev/null
check "plan: predicted ms only with a calibration, placeholder units without" \
  'grep -q "^static plan, DP scheduler: .*, predicted [0-9.]* ms$" "$TMP/o1" && ! grep -q "placeholder" "$TMP/o1" && grep -q "^static plan, DP scheduler: .*uncalibrated: cost [0-9.]* in placeholder units" "$TMP/o3" && ! grep -q "predicted" "$TMP/o3"'
# run --static with the stored calibration (-t 1): its shapes, a predicted plan_ms, no warning
"${RUN[@]}" --segments "$TMP/B.json" --cache-dir "$TMP/cal" -t 1 --static >/dev/null 2>"$TMP/scal.err"; rc=$?
check "--static with a calibration: its shapes, calibrated true, plan_ms a number, no warning" \
  '[ $rc -eq 0 ] && grep -q "static shapes from the stored calibration" "$TMP/scal.err" && ! grep -q "no calibration" "$TMP/scal.err" && jcheck "$TMP/scal.err" "s[\"calibrated\"] is True and isinstance(s[\"plan_ms\"], float) and s[\"plan_ms\"] > 0"'

# bench reuse: static rows say whether they were calibrated; plan_ms is a number only when they were
# (XDG_CACHE_HOME: bench reuse looks for the calibration there, so this run sees none)
BR=("$BIN" bench reuse -m "$M" --workload synthetic --modes blend,static --queries 2 --docs 3 --doc-len 40 --tail 8 --gen 0)
XDG_CACHE_HOME="$TMP/xdg" "${BR[@]}" --json "$TMP/br.json" >/dev/null 2>"$TMP/br.err"; rc=$?
check "bench reuse without a calibration: warning, static row calibrated false and plan_ms null" \
  '[ $rc -eq 0 ] && grep -q "static mode: no calibration for this model/machine" "$TMP/br.err" && python3 -c "
import json, sys
r = {m[\"mode\"]: m for m in json.load(open(sys.argv[1]))[\"modes\"]}
sys.exit(0 if r[\"blend-static\"][\"calibrated\"] is False and r[\"blend-static\"][\"plan_ms\"] is None and r[\"blend\"][\"plan_ms\"] is None and \"calibrated\" not in r[\"blend\"] else 1)" "$TMP/br.json"'
mkdir -p "$TMP/xdg/reprise" && cp "$TMP/cal"/calib-*.txt "$TMP/xdg/reprise/"   # the calibrations made above (-t 1, -t 2)
XDG_CACHE_HOME="$TMP/xdg" "${BR[@]}" --json "$TMP/brc.json" >/dev/null 2>"$TMP/brc.err"; rc=$?
check "bench reuse with a calibration: static row calibrated true, plan_ms > 0, no warning" \
  '[ $rc -eq 0 ] && ! grep -q "no calibration" "$TMP/brc.err" && python3 -c "
import json, sys
r = {m[\"mode\"]: m for m in json.load(open(sys.argv[1]))[\"modes\"]}
sys.exit(0 if r[\"blend-static\"][\"calibrated\"] is True and r[\"blend-static\"][\"plan_ms\"] > 0 else 1)" "$TMP/brc.json"'

# bad input: non-zero exit, a message naming what was wrong, no crash
"${RUN[@]}" --segments "$TMP/B.json" --reuse sometimes >/dev/null 2>"$TMP/e"; rc=$?
check "bad --reuse value rejected" '[ $rc -eq 2 ] && grep -q "\-\-reuse must be none, prefix, full or blend" "$TMP/e" && grep -q sometimes "$TMP/e"'
"$BIN" plan -m "$M" --segments "$TMP/B.json" --reuse sometimes >/dev/null 2>"$TMP/e"; rc=$?
check "plan: bad --reuse value rejected" '[ $rc -eq 2 ] && grep -q "\-\-reuse must be" "$TMP/e"'
"${RUN[@]}" --segments "$TMP/missing.json" >/dev/null 2>"$TMP/e"; rc=$?
check "missing segments file rejected" '[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "missing.json" "$TMP/e"'
"${RUN[@]}" --segments "$TMP/broken.json" >/dev/null 2>"$TMP/e"; rc=$?
check "invalid segments JSON rejected" '[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "broken.json.*line" "$TMP/e"'
"${RUN[@]}" --segments "$TMP/obj.json" >/dev/null 2>"$TMP/e"; rc=$?
check "non-array segments JSON rejected" '[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "must be a JSON array of strings" "$TMP/e"'
"${RUN[@]}" --segments "$TMP/num.json" >/dev/null 2>"$TMP/e"; rc=$?
check "non-string segment rejected" '[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "element 1 is not a string" "$TMP/e"'
"$BIN" plan -m "$M" --segments "$TMP/obj.json" >/dev/null 2>"$TMP/e"; rc=$?
check "plan: non-array segments JSON rejected" '[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "must be a JSON array" "$TMP/e"'
"${RUN[@]}" --segments "$TMP/B.json" --recompute-ratio 1.5 >/dev/null 2>"$TMP/e"; rc=$?
check "--recompute-ratio out of range rejected" '[ $rc -eq 2 ] && grep -q "recompute-ratio" "$TMP/e"'

finish
