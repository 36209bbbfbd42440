#!/bin/sh
# build.sh — configures and builds one configuration: release (default), debug or asan.
set -e
cd "$(dirname "$0")/.."
cfg="${1:-release}"
case "$cfg" in
  release) dir=build;       args="-DCMAKE_BUILD_TYPE=Release" ;;
  debug)   dir=build-debug; args="-DCMAKE_BUILD_TYPE=Debug" ;;
  asan)    dir=build-asan;  args="-DCMAKE_BUILD_TYPE=Debug -DRP_SANITIZE=ON" ;;
  fuzz)    dir=build-fuzz;  args="-DCMAKE_BUILD_TYPE=Debug -DRP_FUZZ=ON -DCMAKE_C_COMPILER=clang" ;;
  *) echo "usage: build.sh [release|debug|asan|fuzz]" >&2; exit 2 ;;
esac
sh scripts/deps.sh
[ -f "$dir/CMakeCache.txt" ] || cmake -S . -B "$dir" $args >/dev/null
cmake --build "$dir" -j"$(nproc)" >&2
echo "$dir"
