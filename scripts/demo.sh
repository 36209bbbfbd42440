#!/bin/sh
# demo.sh — the README's main command: builds, makes the embedded default model with
# `reprise synth`, and runs it. No download needed.
set -e
cd "$(dirname "$0")/.."
dir=$(sh scripts/build.sh release)
mkdir -p "$dir/models"
m="$dir/models/demo-tiny-q8_0.gguf"
[ -f "$m" ] || "$dir/reprise" synth --arch llama --preset tiny --type q8_0 --seed 1 -o "$m"
"$dir/reprise" run -m "$m" -p "Reprise never computes the same context twice." -n 32 --temp 0
