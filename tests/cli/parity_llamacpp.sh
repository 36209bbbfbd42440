#!/bin/bash
# parity_llamacpp.sh — Reprise's next-token logits against llama.cpp's (bench/parity/parity.mjs, llama.cpp from the
# npm package node-llama-cpp installed in bench/peer) on peaked synthetic llama3 models, F32 and Q4_K, at short
# positions: KL(llama.cpp || Reprise) within 2x llama.cpp's own FA on/off noise floor and top-1 agreement where
# llama.cpp's top-2 margin exceeds its noise. Then the self-test: Reprise given a model 1% off (synth --peak 3.03
# instead of 3) must FAIL the same comparison. Skips (77) without node (RP_NODE), cc, or bench/peer's node_modules.
set -u
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
TMP="${RP_TEST_TMP:-/tmp}/parity_llamacpp.$$"
. "$(dirname "$0")/lib/common.sh"
NODE="${RP_NODE:-node}"   # RP_NODE: another node binary
command -v "$NODE" >/dev/null 2>&1 || skip_all "node ($NODE) is not installed (bench/parity needs Node >= 20)"
[ -f "$SRC/bench/peer/node_modules/node-llama-cpp/package.json" ] ||
  skip_all "bench/peer/node_modules is absent (run: cd bench/peer && npm ci --omit=optional)"
command -v "${CC:-cc}" >/dev/null 2>&1 || skip_all "no C compiler (${CC:-cc}) for bench/parity/reprise_logits.c"
[ -e "$(dirname "$BIN")/libreprise.so" ] || skip_all "libreprise.so is not built next to $BIN"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
H="$NODE $SRC/bench/parity/parity.mjs --reprise $BIN --archs llama3 --positions 1,40 -t 2"

$H --types f32,q4_k --json "$TMP/ok.json" >"$TMP/ok.out" 2>&1
rc=$?
check "parity llama3 f32,q4_k at positions 1,40: exit 0 (got $rc)" '[ $rc -eq 0 ]'
[ $rc -eq 0 ] || sed 's/^/    /' "$TMP/ok.out" | tail -n 25
check "both types compared at both positions (4 cells in the JSON)" \
  '[ "$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))[\"results\"]))" "$TMP/ok.json" 2>/dev/null)" = 4 ]'
check "the table says pass for llama3 f32 and q4_k" \
  'grep -q "^| llama3 | f32 | .* | pass |$" "$TMP/ok.out" && grep -q "^| llama3 | q4_k | .* | pass |$" "$TMP/ok.out"'
check "the peaked model's logits spread over several units (std > 1 at every position)" \
  'python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[\"results\"]; sys.exit(0 if r and all(c[\"spread\"] > 1 for c in r) else 1)" "$TMP/ok.json"'

# self-test: a model 1% off on the Reprise side must fail (exit 1, FAIL in the table)
$H --types f32 --reprise-synth-extra "--peak 3.03" >"$TMP/bad.out" 2>&1
rc=$?
check "a 1%-perturbed model on the Reprise side fails the comparison (exit 1, got $rc)" '[ $rc -eq 1 ]'
check "the table names the failure" 'grep -q "^| llama3 | f32 | .*\*\*FAIL\*\*" "$TMP/bad.out"'
[ $rc -eq 1 ] || sed 's/^/    /' "$TMP/bad.out" | tail -n 15
finish
