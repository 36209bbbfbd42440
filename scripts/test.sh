#!/bin/sh
# test.sh — the README's test command: builds (release) and runs every test with ctest.
set -e
cd "$(dirname "$0")/.."
dir=$(sh scripts/build.sh "${1:-release}")
cd "$dir"
ctest --output-on-failure -j"$(nproc)"
