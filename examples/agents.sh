#!/bin/sh
# agents.sh BINARY — runs examples/agents: both agents generate, the helper waits for its tool, then continues.
M="${RP_SHARED_DIR:-../shared}/models/stories260K.gguf"
[ -f "$M" ] || { echo "no $M"; exit 77; }
out=$("$1" "$M" 2>&1) || { echo "$out"; exit 1; }
echo "$out"
echo "$out" | grep -q "^writer (done, 24 tokens this turn):" || { echo "the writer did not finish its turn"; exit 1; }
echo "$out" | grep -q "^helper (waiting for a tool, 8 tokens this turn):" || { echo "the helper did not wait"; exit 1; }
echo "$out" | grep -q "^helper, after the tool (done, 24 tokens this turn):" || { echo "the helper did not resume"; exit 1; }
echo "$out" | grep -q "^steps [1-9]" || { echo "no steps"; exit 1; }
