#!/bin/bash
# gpu_inspect.sh — `reprise inspect --system`'s GPU section: always a `gpu:` line; with the Vulkan backend and a
# device (lavapipe in CI), every device with its kind, Vulkan version, subgroup size, features and memory types;
# without one, the reason. A missing loader ($RP_VULKAN_LIB) is reported, not a crash.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
. "$(dirname "$0")/lib/common.sh"

out="$("$BIN" inspect --system 2>&1)"; rc=$?
check "inspect --system exits 0" '[ $rc -eq 0 ]'
check "a gpu: line" 'echo "$out" | grep -q "^gpu: "'
if echo "$out" | grep -q "^gpu: none (gpu: Vulkan backend not built"; then
  ok "backend not built, and it says so"
elif echo "$out" | grep -q "^  \[0\] "; then
  n=$(echo "$out" | grep -c "^  \[[0-9]*\] ")
  check "the count line matches the $n devices" 'echo "$out" | grep -q "^gpu: $n Vulkan device"'
  kinds='^  \[[0-9]+\] .*\((discrete|integrated|virtual|cpu|other); Vulkan [0-9]+\.[0-9]+\.[0-9]+;'
  check "each device: kind and Vulkan version" '[ "$(echo "$out" | grep -cE "$kinds")" -eq $n ]'
  feats='subgroup size [0-9]+ \| fp16 [01] \| int8 dot product [01] \| cooperative matrix [01] \| shared memory [01]'
  check "each device: subgroup size, int8 dot product, cooperative matrix, shared memory" \
    '[ "$(echo "$out" | grep -cE "$feats")" -eq $n ]'
  check "memory types listed with their properties" 'echo "$out" | grep -qE "memory type 0:( device-local| host-visible)+"'
  if echo "$out" | grep -q "llvmpipe"; then
    check "lavapipe: shared memory (buffers used in place)" 'echo "$out" | grep -q "shared memory 1 (buffers used in place"'
  fi
  # no loader: reported, exit 0
  out2="$(RP_VULKAN_LIB=/nonexistent/libvulkan.so.1 "$BIN" inspect --system 2>&1)"; rc2=$?
  check "a missing loader is reported" '[ $rc2 -eq 0 ] && echo "$out2" | grep -q "^gpu: none (gpu: cannot open the Vulkan loader /nonexistent"'
else
  check "no device: the reason is given" 'echo "$out" | grep -qE "^gpu: none \(.+\)"'
fi
finish
