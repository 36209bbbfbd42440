#!/bin/bash
# fidelity.sh — issue 4's fidelity bar on stories260K over several seeds: blend at r = 0.25 cuts full reuse's KL >= 3x, greedy agreement >= 90 %.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/fidelity.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

M="$SHARED/models/stories260K.gguf"
if [ ! -f "$M" ] || ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP fidelity checks: $M or python3 not found"
  echo "0 passed, 0 failed, 1 skipped"
  exit 77
fi

# One seed = 12 generated stories, 50 prompts of 4-6 of them reordered (~1 s).
# The bar must hold on every seed, not on a tuned one; the deviation-only rule
# (CacheBlend's) is run beside it to show the comparison is not vacuous.
# Sanitizer builds (RP_SANITIZED=1, ~45x slower) check the same bar on seeds 1-2 with 25 prompts each.
SEEDS="1 2 3 4 5 6"; PROMPTS=50
[ "${RP_SANITIZED:-0}" = 1 ] && { SEEDS="1 2"; PROMPTS=25; }
for seed in $SEEDS; do
  for sel in hybrid dev; do
    "$BIN" bench fidelity -m "$M" -t 1 --seed $seed --select $sel --prompts $PROMPTS --json > "$TMP/$sel-$seed.json" 2> "$TMP/err" ||
      { bad "bench fidelity --seed $seed --select $sel exits 0"; cat "$TMP/err"; continue; }
  done
  out=$(python3 - "$TMP/hybrid-$seed.json" "$TMP/dev-$seed.json" <<'PY'
import json, sys
def load(p):
    return {r["mode"]: r for r in json.load(open(p))}
h, d = load(sys.argv[1]), load(sys.argv[2])
full, bl = h["full"], h["blend r=0.25"]
cut = full["mean_kl"] / max(bl["mean_kl"], 1e-12)
print("cut=%.2f greedy=%.4f dev_cut=%.2f" % (cut, bl["greedy_agreement"], d["full"]["mean_kl"] / max(d["blend r=0.25"]["mean_kl"], 1e-12)))
ok = cut >= 3.0 and bl["greedy_agreement"] >= 0.90 and full["mean_kl"] > 0
ok = ok and h["blend r=0.50"]["mean_kl"] < bl["mean_kl"]          # more recompute, closer to exact
ok = ok and bl["recomputed_tokens"] > 0 and bl["reused_tokens"] == full["reused_tokens"]
sys.exit(0 if ok else 1)
PY
  ) && ok "seed $seed: blend r=0.25 cuts full's KL >= 3x, greedy >= 90 % ($out)" || bad "seed $seed: fidelity bar ($out)"
done
finish
