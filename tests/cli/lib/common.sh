# common.sh — what the tests/cli scripts share, sourced as `. "$(dirname "$0")/lib/common.sh"` (not a test itself:
# ctest runs tests/cli/*.sh): pass / fail / skip counters, check, the summary line scripts/test.sh reads, skipping a
# whole script (exit 77: ctest's "Skipped"), and the reader of `reprise run`'s last `stats: {json}` line.
pass=0; fail=0; skip=0
ok()    { pass=$((pass+1)); echo "ok   $1"; }
bad()   { fail=$((fail+1)); echo "FAIL $1"; }
# check NAME EXPR: ok when EXPR (evaluated) succeeds, else FAIL
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
# skip_all WHY: nothing of this script can run here
skip_all() { echo "SKIP $1"; echo "0 passed, 0 failed, 1 skipped"; exit 77; }
# finish: the summary line, and the script's status
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" -eq 0 ]; }
# stats_of FILE KEY: KEY of the last `stats: {json}` line of FILE (empty when absent or null)
stats_of() {
  python3 - "$1" "$2" <<'PYEOF'
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("stats: ")]
v = json.loads(lines[-1][len("stats: "):]).get(sys.argv[2]) if lines else None
print("" if v is None else v)
PYEOF
}
