#!/bin/bash
# store_trust.sh — what `--cache-dir` trusts, end to end: a store directory that is group/world-writable (or another
# user's) is refused by run, serve and cache; KV copied from another store (another secret) is reported corrupt by
# `cache verify` and never reused by a run; an unkeyed store of older builds is upgraded; `cache stats` counts
# failed writes.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/store_trust.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 (edits the databases) not found"; exit 77; }
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"
P="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her big red ball. One day she met a dog."
Q="Tom and Sue went to the beach. They built a big sand castle and saw a crab. The crab was happy and it was sunny all day long."
RUN=("$BIN" run -m "$M" -n 8 --temp 0 --reuse prefix)
"${RUN[@]}" -p "$P" >"$TMP/plain.out" 2>/dev/null

# ---- loose modes: refused, with the path, the mode found and what is required
"${RUN[@]}" -p "$Q" --cache-dir "$TMP/loose" >/dev/null 2>&1
chmod 777 "$TMP/loose"
"$BIN" cache stats --cache-dir "$TMP/loose" >/dev/null 2>"$TMP/e"; rc=$?
check "cache stats refuses a world-writable store directory" '[ $rc -eq 1 ] && grep -q "loose.*writable by group/others (mode 0777" "$TMP/e" && grep -q refusing "$TMP/e"'
"${RUN[@]}" -p "$Q" --cache-dir "$TMP/loose" >"$TMP/loose.out" 2>"$TMP/e"; rc=$?
check "run does not use it (and says why)" '[ $rc -eq 0 ] && grep -q "cache-dir ignored.*mode 0777" "$TMP/e" && [ "$(stats_of "$TMP/e" reused_prefix)" = 0 ]'
timeout 60 "$BIN" serve -m "$M" --cache-dir "$TMP/loose" --port 0 >/dev/null 2>"$TMP/e"; rc=$?
check "serve refuses to start on it" '[ $rc -eq 1 ] && grep -q "mode 0777" "$TMP/e"'
check "the directory is left as it was" '[ "$(stat -c %a "$TMP/loose")" = 777 ]'
chmod 700 "$TMP/loose"; chmod 666 "$TMP/loose/kv.db"
"$BIN" cache verify --cache-dir "$TMP/loose" >/dev/null 2>"$TMP/e"; rc=$?
check "a world-writable kv.db is refused" '[ $rc -eq 1 ] && grep -q "kv.db.*mode 0666" "$TMP/e"'
chmod 644 "$TMP/loose/kv.db"
"${RUN[@]}" -p "$Q" --cache-dir "$TMP/loose" >/dev/null 2>"$TMP/e"; rc=$?
check "a world-readable kv.db is tightened to 0600 by a writer" '[ $rc -eq 0 ] && [ "$(stat -c %a "$TMP/loose/kv.db")" = 600 ] && [ "$(stats_of "$TMP/e" reused_prefix)" -gt 0 ]'
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  chown nobody "$TMP/loose"
  "$BIN" cache stats --cache-dir "$TMP/loose" >/dev/null 2>"$TMP/e"; rc=$?
  check "another user's store directory is refused" '[ $rc -eq 1 ] && grep -q "owned by another user" "$TMP/e"'
  chown root "$TMP/loose"
else
  skip=$((skip+1)); echo "skip another user's store directory (needs root)"
fi

# ---- KV copied from another store: its checksums were keyed with the other store's secret
"${RUN[@]}" -p "$P" --cache-dir "$TMP/b" >/dev/null 2>&1
"$BIN" cache verify --cache-dir "$TMP/b" >"$TMP/vb.out" 2>&1; rc=$?
check "cache verify passes on a healthy store" '[ $rc -eq 0 ] && grep -q " 0 corrupt" "$TMP/vb.out"'
"$BIN" cache clear --cache-dir "$TMP/a" >/dev/null 2>&1   # a new, empty store (its own secret)
python3 - "$TMP/a/kv.db" "$TMP/b/kv.db" <<'EOF'
import sqlite3, sys
d = sqlite3.connect(sys.argv[1])
d.execute("ATTACH ? AS b", (sys.argv[2],))
for t in ("models", "chunks", "payloads", "keywords"):
    d.execute(f"INSERT OR REPLACE INTO main.{t} SELECT * FROM b.{t}")
d.commit()
EOF
[ -d "$TMP/b/kv" ] && cp -rp "$TMP/b/kv/." "$TMP/a/kv/"
n=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from chunks').fetchone()[0])" "$TMP/a/kv.db")
"$BIN" cache verify --cache-dir "$TMP/a" >"$TMP/va.out" 2>&1; rc=$?
check "cache verify reports every copied chunk corrupt ($n)" '[ $rc -eq 1 ] && [ "$n" -gt 0 ] && grep -q "verified $n chunks: 0 ok, $n corrupt" "$TMP/va.out"'
"${RUN[@]}" -p "$P" --cache-dir "$TMP/a" >"$TMP/a.out" 2>"$TMP/a.err"; rc=$?
check "a run does not reuse them: nothing reused, the plain run's text" '[ $rc -eq 0 ] && [ "$(stats_of "$TMP/a.err" reused_prefix)" = 0 ] && [ "$(stats_of "$TMP/a.err" reused_nonprefix)" = 0 ] && cmp -s "$TMP/a.out" "$TMP/plain.out"'
"${RUN[@]}" -p "$P" --cache-dir "$TMP/b" >"$TMP/b.out" 2>"$TMP/b.err"
check "the store they came from still reuses its own" '[ "$(stats_of "$TMP/b.err" reused_prefix)" -gt 0 ] && cmp -s "$TMP/b.out" "$TMP/plain.out"'

# ---- a store of older builds (schema 1, unkeyed checksums)
"${RUN[@]}" -p "$P" --cache-dir "$TMP/old" >/dev/null 2>&1
python3 -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute('drop table secret'); d.execute(\"update meta set value = 1 where key = 'schema'\"); d.commit()" "$TMP/old/kv.db"
"$BIN" cache verify --cache-dir "$TMP/old" >/dev/null 2>"$TMP/e"; rc=$?
check "cache verify refuses an unkeyed store, saying how to upgrade it" '[ $rc -eq 1 ] && grep -q "older builds" "$TMP/e" && grep -q "upgrade" "$TMP/e"'
"${RUN[@]}" -p "$P" --cache-dir "$TMP/old" >"$TMP/old.out" 2>"$TMP/old.err"; rc=$?
check "a run upgrades it, dropping its chunks" '[ $rc -eq 0 ] && grep -q "unkeyed format of older builds: its [0-9]* chunks were dropped" "$TMP/old.err" && [ "$(stats_of "$TMP/old.err" reused_prefix)" = 0 ] && cmp -s "$TMP/old.out" "$TMP/plain.out"'
"$BIN" cache verify --cache-dir "$TMP/old" >"$TMP/vo.out" 2>&1; rc=$?
check "the upgraded store verifies" '[ $rc -eq 0 ] && grep -q " 0 corrupt" "$TMP/vo.out"'

# ---- cache stats: failed writes
"$BIN" cache stats --cache-dir "$TMP/b" >"$TMP/stats.out" 2>&1; rc=$?
check "cache stats reports write failures" '[ $rc -eq 0 ] && grep -q "^write failures: 0 " "$TMP/stats.out"'
"$BIN" cache --help >"$TMP/help" 2>&1
check "cache --help says what the store trusts" 'grep -q "group/world-writable" "$TMP/help" && grep -q "secret" "$TMP/help"'

finish
