#!/bin/sh
# fuzz.sh — builds the libFuzzer targets with clang and runs each for a bounded time (seconds, default 60).
set -e
cd "$(dirname "$0")/.."
secs="${1:-60}"
sh scripts/deps.sh
dir=build-fuzz
[ -f "$dir/CMakeCache.txt" ] || cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DRP_FUZZ=ON -DCMAKE_C_COMPILER=clang >/dev/null
targets=$(ls fuzz/fuzz_*.c | sed 's#fuzz/##; s#\.c$##')
for t in $targets; do cmake --build "$dir" -j"$(nproc)" --target "$t" >&2; done
for name in $targets; do
  t="$dir/$name"
  corpus="$dir/corpus-$name"; mkdir -p "$corpus"
  [ -d "fuzz/seeds/$name" ] && cp -n fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s" >&2
  "$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 "$corpus" >"$dir/$name.log" 2>&1 || { tail -50 "$dir/$name.log"; exit 1; }
  grep -E "^Done|stat::number_of_executed_units" "$dir/$name.log" | tail -1 >&2 || true
done
echo "fuzz: no crash"
