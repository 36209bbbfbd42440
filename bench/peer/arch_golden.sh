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
         "llama tiny f32" "phi3 tiny-longrope f32 long"; do
    set -- $c
    # "long": a context past the original length 4096, so both engines use LongRoPE's long factors
    n=1100; pos=0,1,100,1000,1099; name="$1-$2-$3"
    if [ "${4:-}" = long ]; then n=4700; pos=0,100,4000,4500,4699; name="$name-long"; fi
    f="$tmp/$name.gguf"
    "$bin" synth --arch "$1" --preset "$2" --type "$3" --seed 7 -o "$f" 2>/dev/null
    node "$here/arch_logits.mjs" -m "$f" -n $n --positions $pos -k 8 -t 2 >"$tmp/out.json"
    # the synth parameters first, so the test can remake the file
    printf '{"arch": "%s", "preset": "%s", "type": "%s", "seed": 7, "llama_cpp": ' "$1" "$2" "$3" >"$out/$name.json"
    cat "$tmp/out.json" >>"$out/$name.json"
    echo "}" >>"$out/$name.json"
    echo "wrote tests/data/arch/$name.json"
done
