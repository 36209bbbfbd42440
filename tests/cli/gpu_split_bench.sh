#!/bin/bash
# gpu_split_bench.sh — `reprise bench split`, the CPU + GPU split matmul benchmark, on a small shape: with a
# device whose memory the CPU maps (lavapipe in CI) one row per shape and n with a time per fraction, the
# calibrated fraction among the candidates, and the CPU-device warning; without the backend, a clear error.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
. "$(dirname "$0")/lib/common.sh"

out="$("$BIN" bench split --shapes 64x256,32x512 -n 1,3 --f 0,0.5,1 -r 1 2>&1)"; rc=$?
if echo "$out" | grep -q "Vulkan backend not built\|no Vulkan device\|cannot open the Vulkan loader\|no usable"; then
  check "no device: exit 1 with the reason" '[ $rc -eq 1 ]'
else
  check "exits 0" '[ $rc -eq 0 ]'
  check "four rows (2 shapes x 2 n)" '[ "$(echo "$out" | grep -cE "^\| q4_0 +\| +(64x256|32x512) +\| +[13] \|")" -eq 4 ]'
  check "a time for each of the 3 fractions, best among them" \
    '[ "$(echo "$out" | grep -cE "^\| q4_0 .*(\| +[0-9.]+ ){3}\| +(0|0\.5|1) +\|")" -eq 4 ]'
  if echo "$out" | grep -q "llvmpipe"; then
    check "a CPU device is named as such" 'echo "$out" | grep -q "a CPU device: these figures say nothing about a GPU"'
  fi
  js="$("$BIN" bench split --shapes 64x256 -n 1 --f 0,1 -r 1 --json 2>/dev/null)"
  check "--json parses with best_f" 'echo "$js" | python3 -c "import json,sys; d=json.load(sys.stdin); assert d[\"points\"][0][\"best_f\"] in (0,1)"'
fi
bad="$("$BIN" bench split --shapes 64x100 2>&1)"; rcb=$?
check "a shape off the block size is refused" '[ $rcb -eq 2 ] && echo "$bad" | grep -q "multiple of q4_0"'
finish
