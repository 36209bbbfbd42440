#!/bin/sh
# generate.sh BINARY — runs examples/generate on stories260K and checks it prints what `reprise run` prints.
M="${RP_SHARED_DIR:-../shared}/models/stories260K.gguf"
[ -f "$M" ] || { echo "no $M"; exit 77; }
P="Once upon a time, there was a little girl named Lily."
out=$("$1" "$M" "$P" 24 2>/dev/null) || { echo "generate failed"; exit 1; }
ref=$("$RP_BIN" run -m "$M" -p "$P" -n 24 --temp 0 2>/dev/null) || { echo "reprise run failed"; exit 1; }
echo "generate: $out"
[ -n "$out" ] && [ "$out" = "$ref" ] || { echo "differs from reprise run: $ref"; exit 1; }
