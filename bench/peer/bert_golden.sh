#!/bin/sh
# Remakes tests/data/bert/*.json: llama.cpp's WordPiece ids and pooled embeddings (bert_golden.mjs) on the tiny bert
# and nomic-bert synthetic models at F32, F16 and Q8_0, which tests/test_bert.c regenerates with the same synth
# parameters and compares Reprise against. Needs `npm ci --omit=optional` here and a built `reprise`.
#   sh bench/peer/bert_golden.sh build/reprise [ARCH:PRESET:TYPE ...]
# With specs after the binary (e.g. bert:bge-small:f16 nomic-bert:nomic-embed-text-v1.5:q8_0, the real shapes, too
# slow to synthesize in every test run), only those are made; RP_BERT_GOLDEN_EXTRA=FILE runs one in the test.
# Write those elsewhere (OUT=DIR) when they are not meant for tests/data/bert.
set -e
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: bert_golden.sh PATH/TO/reprise [ARCH:PRESET:TYPE ...]}
shift
out="${OUT:-$here/../../tests/data/bert}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
specs="$*"
[ -n "$specs" ] || specs="bert:tiny:f32 bert:tiny:f16 bert:tiny:q8_0 nomic-bert:tiny:f32 nomic-bert:tiny:f16 nomic-bert:tiny:q8_0"
for c in $specs; do
    arch=${c%%:*}; rest=${c#*:}; preset=${rest%%:*}; type=${rest#*:}
    f="$tmp/$arch-$preset-$type.gguf"
    # RP_BERT_VOCAB=VOCAB.gguf: the tokenizer of a real vocabulary instead of the built-in one (the test then needs it too)
    "$bin" synth --arch "$arch" --preset "$preset" --type "$type" --seed 7 ${RP_BERT_VOCAB:+--vocab "$RP_BERT_VOCAB"} -o "$f" 2>/dev/null
    node "$here/bert_golden.mjs" -m "$f" -t 2 >"$tmp/out.json"
    # the synth parameters first, so the test can remake the file
    printf '{"arch": "%s", "preset": "%s", "type": "%s", "seed": 7, "llama_cpp": ' "$arch" "$preset" "$type" >"$out/$arch-$preset-$type.json"
    cat "$tmp/out.json" >>"$out/$arch-$preset-$type.json"
    echo "}" >>"$out/$arch-$preset-$type.json"
    echo "wrote $out/$arch-$preset-$type.json"
done
