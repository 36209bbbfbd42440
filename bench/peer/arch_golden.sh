#!/bin/sh
# Remakes tests/data/arch/*.json: llama.cpp's next-token top-k log probabilities (arch_logits.mjs) on the tiny
# qwen2 / phi3 synthetic models, which tests/test_arch.c (test_llama_cpp_golden) regenerates with the same
# synth parameters and compares Reprise against. Needs `npm ci --omit=optional` here and a built `reprise`.
#   sh bench/peer/arch_golden.sh build/reprise
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: arch_golden.sh PATH/TO/reprise}
out="$here/../../tests/data/arch"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
for c in "qwen2 tiny f32" "qwen2 tiny q8_0" "phi3 tiny f32" "phi3 tiny q8_0" "phi3 tiny-longrope f32" "phi3 tiny-longrope q8_0" "llama tiny q8_0" \
         "llama tiny f32"; do
    set -- $c
    f="$tmp/$1-$2-$3.gguf"
    "$bin" synth --arch "$1" --preset "$2" --type "$3" --seed 7 -o "$f" 2>/dev/null
    node "$here/arch_logits.mjs" -m "$f" -n 1100 --positions 0,1,100,1000,1099 -k 8 -t 2 >"$tmp/out.json"
    # the synth parameters first, so the test can remake the file
    printf '{"arch": "%s", "preset": "%s", "type": "%s", "seed": 7, "llama_cpp": ' "$1" "$2" "$3" >"$out/$1-$2-$3.json"
    cat "$tmp/out.json" >>"$out/$1-$2-$3.json"
    echo "}" >>"$out/$1-$2-$3.json"
    echo "wrote tests/data/arch/$1-$2-$3.json"
done
