#!/bin/bash
# gpu_run.sh — the GPU offload end to end on lavapipe (Mesa's Vulkan on the CPU): `reprise run -ngl all --device
# llvmpipe` prints the device and layer line and the same greedy text as the CPU (stories260K's golden text),
# a split (-ngl 2) too; the default reuse (blend) and an explicit --reuse blend run through the GPU layers;
# --no-gpu and the default (lavapipe is never picked unless named) stay on the CPU; `bench model -ngl all` runs
# and reports the layers. Skips (77) without the backend, without a llvmpipe device, or without ../shared.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
. "$(dirname "$0")/lib/common.sh"
SHARED="${RP_SHARED_DIR:-../shared}"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || skip_all "$M not found (set RP_SHARED_DIR)"
"$BIN" inspect --system 2>&1 | grep -q "llvmpipe" || skip_all "no llvmpipe Vulkan device (scripts/deps.sh installs mesa-vulkan-drivers)"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
want="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it,"

got=$(env -u RP_GPU_DEVICE "$BIN" run -m "$M" -p "Once upon a time" -n 48 --temp 0 -ngl all --device llvmpipe 2>"$TMP/err"); rc=$?
check "run -ngl all --device llvmpipe exits 0" '[ $rc -eq 0 ]'
check "the start-up line names the device and 5 of 5 layers" 'grep -q "^reprise run: gpu: llvmpipe.*5 of 5 layers on the GPU, output head on the GPU" "$TMP/err"'
check "greedy text on the GPU equals the golden (the CPU's)" '[ "Once upon a time$got" = "$want" ]'
check "the default reuse stays blend (nothing said about it)" '! grep -q "reuse prefix" "$TMP/err"'

got=$(env -u RP_GPU_DEVICE "$BIN" run -m "$M" -p "Once upon a time" -n 48 --temp 0 -ngl 2 --device llvmpipe 2>"$TMP/err2"); rc=$?
check "run -ngl 2 exits 0" '[ $rc -eq 0 ]'
check "split: 2 of 5 layers on the GPU, 0-2 on the CPU" 'grep -q "2 of 5 layers on the GPU (3-4), 0-2 on the CPU, output head on the CPU" "$TMP/err2"'
check "split: greedy text equals the golden" '[ "Once upon a time$got" = "$want" ]'

got=$(RP_GPU_DEVICE=llvmpipe "$BIN" run -m "$M" -p "Once upon a time" -n 48 --temp 0 --reuse blend 2>"$TMP/err3"); rc=$?
check "--reuse blend with every layer on the GPU: exits 0 with the golden text" '[ $rc -eq 0 ] && [ "Once upon a time$got" = "$want" ]'

env -u RP_GPU_DEVICE "$BIN" run -m "$M" -p "Once upon a time" -n 4 --temp 0 --no-gpu >/dev/null 2>"$TMP/err4"; rc=$?
check "--no-gpu: CPU only, said once" '[ $rc -eq 0 ] && [ "$(grep -c "gpu:" "$TMP/err4")" -eq 1 ] && grep -q "gpu: off" "$TMP/err4"'
if ! "$BIN" inspect --system 2>&1 | grep -E "^  \[[0-9]+\] " | grep -vq "(cpu;"; then
  env -u RP_GPU_DEVICE "$BIN" run -m "$M" -p "Once upon a time" -n 4 --temp 0 >/dev/null 2>"$TMP/err5"; rc=$?
  check "default with only lavapipe: CPU only, and nothing said about a GPU" '[ $rc -eq 0 ] && ! grep -q "gpu:" "$TMP/err5"'
fi

"$BIN" run -m "$M" -p "x" -n 1 -ngl lots >/dev/null 2>"$TMP/err6"; rc=$?
check "-ngl lots is a usage error naming the option" '[ $rc -eq 2 ] && grep -q -- "-ngl takes a layer count or .all." "$TMP/err6"'
env -u RP_GPU_DEVICE "$BIN" run -m "$M" -p "x" -n 1 --device nosuchgpu >/dev/null 2>"$TMP/err7"; rc=$?
check "an unknown --device fails, naming it" '[ $rc -ne 0 ] && grep -q "nosuchgpu" "$TMP/err7"'

out=$(env -u RP_GPU_DEVICE "$BIN" bench model -m "$M" -p 32 -n 8 -r 1 -t 1 --json -ngl all --device llvmpipe 2>"$TMP/err8"); rc=$?
check "bench model -ngl all runs" '[ $rc -eq 0 ]'
check "bench model: pp and tg rows with gpu_layers 5" '[ "$(echo "$out" | grep -c "\"gpu_layers\": 5")" -eq 2 ]'
check "bench model: the device line" 'grep -q "gpu: llvmpipe" "$TMP/err8"'
finish
