#!/bin/bash
# arch_presets.sh — issue 16: qwen2 and phi3 presets go synth -> inspect -> run at Q4_0 and Q8_0 (SIMD kernels and
# RP_FORCE_REF=1). The tiny presets always; the real shapes (qwen2.5-0.5b, qwen2.5-1.5b, phi-3-mini, phi-4-mini:
# 0.3-4 GB files) only with RP_TEST_REAL_PRESETS=1.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
TMP="${RP_TEST_TMP:-/tmp}/arch_presets.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

presets="qwen2:tiny phi3:tiny phi3:tiny-longrope"
if [ "${RP_TEST_REAL_PRESETS:-0}" = 1 ]; then
  presets="$presets qwen2:qwen2.5-0.5b qwen2:qwen2.5-1.5b phi3:phi-3-mini phi3:phi-4-mini"
else
  echo "# real-shape presets skipped (set RP_TEST_REAL_PRESETS=1 to run them)"
fi
for spec in $presets; do
  arch=${spec%%:*}; preset=${spec#*:}
  for type in q4_0 q8_0; do
    f="$TMP/$arch-$preset-$type.gguf"
    if ! "$BIN" synth --arch "$arch" --preset "$preset" --type "$type" -o "$f" 2>"$TMP/e"; then
      bad "$arch $preset $type: synth ($(cat "$TMP/e"))"; continue
    fi
    "$BIN" inspect "$f" >"$TMP/i" 2>&1
    check "$arch $preset $type: inspect names the architecture" "grep -q 'model: arch $arch,' '$TMP/i'"
    check "$arch $preset $type: inspect lists a $type tensor" "grep -q ' $type ' '$TMP/i'"
    "$BIN" run -m "$f" -p "once upon a time" -n 6 --temp 0 >"$TMP/o" 2>"$TMP/e"
    check "$arch $preset $type: run generates 6 tokens" "grep -q 'generated: 6 tokens' '$TMP/e' '$TMP/o'"
    RP_FORCE_REF=1 "$BIN" run -m "$f" -p "once upon a time" -n 6 --temp 0 >"$TMP/o" 2>"$TMP/e"
    check "$arch $preset $type: run with the reference kernels generates 6 tokens" "grep -q 'generated: 6 tokens' '$TMP/e' '$TMP/o'"
    rm -f "$f"
  done
done
# LongRoPE: the context is the file's (the long factors past the original 4096), and a run past 4096 generates
"$BIN" synth --arch phi3 --preset tiny-longrope --type q8_0 -o "$TMP/lr.gguf" 2>/dev/null
"$BIN" inspect "$TMP/lr.gguf" >"$TMP/i" 2>&1
check "phi3 tiny-longrope: n_ctx_train is the file's 131072 (long factors)" "grep -q 'n_ctx_train 131072' '$TMP/i'"
check "phi3 tiny-longrope: n_rot 48 of head_dim 64" "grep -q 'head_dim 64, n_rot 48' '$TMP/i'"
"$BIN" run -m "$TMP/lr.gguf" -c 8192 -p "once upon a time" -n 6 --temp 0 >"$TMP/o" 2>"$TMP/e"
check "phi3 tiny-longrope: run -c 8192 (long factors) generates 6 tokens" "grep -q 'generated: 6 tokens' '$TMP/e' '$TMP/o'"
# an unknown architecture is named
"$BIN" synth --arch gpt2 --preset tiny --type q8_0 -o "$TMP/x.gguf" >"$TMP/o" 2>&1
check "synth --arch gpt2 is refused naming the choices" "grep -q 'llama, qwen3, qwen2, phi3, gemma2, gemma3, bert or nomic-bert' '$TMP/o'"
"$BIN" synth --arch qwen2 --preset phi-4-mini --type q8_0 -o "$TMP/x.gguf" >"$TMP/o" 2>&1
check "synth --arch qwen2 --preset phi-4-mini names the preset's architecture" "grep -q \"preset 'phi-4-mini' is a phi3 model\" '$TMP/o'"
finish
