#!/bin/sh
# demo.sh — the README's main command: builds, then `reprise demo` makes the embedded default model
# with `reprise synth` (no download) and shows KV reuse: three requests sharing documents in
# different orders, with a TTFT table for no reuse, prefix caching and blend.
set -e
cd "$(dirname "$0")/.."
dir=$(sh scripts/build.sh release)
"$dir/reprise" demo "$@"
