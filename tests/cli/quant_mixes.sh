#!/bin/bash
# quant_mixes.sh — issue 16: a file of every llama.cpp standard mix is written by `reprise synth --type`, named type
# by type by `reprise inspect`, loads and generates, with the SIMD kernels and with RP_FORCE_REF=1 (the references).
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
TMP="${RP_TEST_TMP:-/tmp}/quant_mixes.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

# mix, and a tensor type the mix must contain (llama.cpp's rules on the tiny llama: 4 layers, GQA 2)
for spec in Q2_K:q2_K Q3_K_S:q3_K Q3_K_M:q5_K Q3_K_L:q5_K Q4_K_S:q5_K Q4_K_M:q6_K Q5_K_S:q5_K Q5_K_M:q6_K \
            Q6_K:q6_K Q8_0:q8_0 IQ4_XS:iq4_xs IQ4_NL:iq4_nl Q4_1:q4_1 Q5_0:q5_0 Q5_1:q5_1; do
  mix=${spec%%:*}; want=${spec#*:}
  f="$TMP/$mix.gguf"
  if ! "$BIN" synth --arch llama --preset tiny --type "$mix" -o "$f" 2>"$TMP/e"; then bad "$mix: synth ($(cat "$TMP/e"))"; continue; fi
  "$BIN" inspect "$f" >"$TMP/i" 2>&1
  check "$mix: inspect lists a $want tensor" "grep -q ' $want ' '$TMP/i'"
  check "$mix: inspect names no unknown type" "! grep -q ' ? ' '$TMP/i'"
  simd=$("$BIN" run -m "$f" -p "once upon" -n 6 --temp 0 2>/dev/null | head -c 4000)
  ref=$(RP_FORCE_REF=1 "$BIN" run -m "$f" -p "once upon" -n 6 --temp 0 2>/dev/null | head -c 4000)
  check "$mix: generates" "[ -n \"\$simd\" ]"
  check "$mix: generates with the reference kernels" "[ -n \"\$ref\" ]"
done
finish
