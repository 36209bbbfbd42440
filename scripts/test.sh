#!/bin/sh
# test.sh — the README's test command: builds (release, or the configuration named: asan, debug) and runs
# every test with ctest, then prints one summary line that counts skips: tests skipped entirely (ctest's
# "Not Run", exit code 77: e.g. no ../shared, so no models) and passing tests that skipped some of their
# cases (their "P passed, F failed, S skipped" lines). Exits with ctest's status.
set -e
cd "$(dirname "$0")/.."
src=$(pwd)
dir=$(sh scripts/build.sh "${1:-release}")
cd "$dir"
out=Testing/ctest-summary.txt
mkdir -p Testing
# set +e: the subshell inherits -e, which would end it at a failing ctest before its status is recorded
(set +e; ctest --output-on-failure -j"$(nproc)"; echo $? >Testing/ctest-rc) | tee "$out"
rc=$(cat Testing/ctest-rc)
shared="${RP_SHARED_DIR:-$src/../shared}"
why=""
[ -f "$shared/models/stories260K.gguf" ] || why=" (no ${RP_SHARED_DIR:-../shared}/models/stories260K.gguf: models missing)"
awk -v why="$why" -v logf="Testing/Temporary/LastTest.log" '
  # ctest: "  3/40 Test  #8: test_gguf ......   Passed    0.14 sec" / "***Skipped" / "***Failed" / "***Timeout"
  / Test +#[0-9]+: / {
    n++
    name = $0; sub(/^.* Test +#[0-9]+: /, "", name); sub(/ .*$/, "", name)
    if ($0 ~ /\*\*\*Skipped|Not Run/) { skipped++; skipped_names = skipped_names " " name }
    else if ($0 ~ / Passed /) { passed++; ok[name] = 1 }
    else failed++
  }
  END {
    # passing tests that skipped some cases: their last "P passed, F failed, S skipped" line, from the log
    while ((getline line < logf) > 0) {
      if (line ~ /^[0-9]+\/[0-9]+ Test: /) { cur = line; sub(/^[0-9]+\/[0-9]+ Test: /, "", cur) }
      else if (line ~ /^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$/) { split(line, w, " "); cases[cur] = w[5] }
    }
    partial = ""; np = 0
    for (t in ok) if (cases[t] + 0 > 0) { np++; partial = partial (np > 1 ? ", " : "") t " " cases[t] }
    printf "%d tests: %d passed, %d skipped%s, %d failed", n, passed, skipped, skipped ? why : "", failed
    if (np) printf "; %d of the passed skipped some cases (%s)", np, partial
    printf "\n"
    if (skipped) printf "skipped entirely:%s\n", skipped_names
  }' "$out"
exit "$rc"
