#!/bin/sh
# Prints the ggml golden table of tests/test_quant.c (test_ggml_golden_new_types) from node-llama-cpp's libggml.
# Needs `npm ci --omit=optional` in bench/peer first.
set -e
here=$(cd "$(dirname "$0")" && pwd)
dir="$here/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
[ -f "$dir/libggml-base.so" ] || { echo "ggml_golden.sh: $dir/libggml-base.so missing (run npm ci --omit=optional in bench/peer)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
${CC:-cc} -O1 -ffp-contract=off -o "$out/ggml_golden" "$here/ggml_golden.c" -ldl -lm
LD_LIBRARY_PATH="$dir" "$out/ggml_golden" "$dir/libggml-base.so"
