#!/bin/bash
# bench_ablation.sh — `reprise bench ablation` on stories260K: every variant row, JSON / HTML output, and the counters each ablation must move.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/bench_ablation.$$"
M=""
for f in stories260K.gguf stories260K-q8_0.gguf stories260K-q4_0.gguf; do
  [ -f "$SHARED/models/$f" ] && { M="$SHARED/models/$f"; break; }
done
[ -n "$M" ] || { echo "SKIP: no stories260K GGUF under $SHARED/models (set RP_SHARED_DIR)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed (checks the JSON)"; exit 77; }
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
# no calibration stored by another run may change the static shapes: measure them here (--calibrate)
export XDG_CACHE_HOME="$TMP/xdg"
. "$(dirname "$0")/lib/common.sh"
report() {   # the python checks' "ok   ..." / "FAIL ..." lines, counted
  while read -r line; do
    case "$line" in
      ok*) ok "${line#ok   }" ;;
      FAIL*) bad "${line#FAIL }" ;;
      *) bad "python: $line" ;;
    esac
  done < "$1"
}

VARIANTS="full no-ram-pool naive-store lru-eviction no-pipeline sync-persist no-prefetch static static-fixed-shapes static-no-merge"

"$BIN" bench ablation --help > "$TMP/usage"
check "usage names every variant" 'for v in $VARIANTS; do grep -q "^  $v " "$TMP/usage" || exit 1; done'
"$BIN" bench ablation -m "$M" --variants full,bogus >/dev/null 2>"$TMP/e"; rc=$?
check "unknown variant exits 2 naming it" '[ $rc -eq 2 ] && grep -q "bogus" "$TMP/e"'
"$BIN" bench ablation -m "$M" --docs 2 --per-query 3 >/dev/null 2>&1; rc=$?
check "more documents per query than the corpus exits 2" '[ $rc -eq 2 ]'

# tiny workload: 8 docs x 96 tokens, 8 queries of 3 docs (2 warm-up); 60 ms between queries lets the writer and the prefetcher run
mkdir -p "$TMP/cache"
"$BIN" bench ablation -m "$M" -t 1 --docs 8 --doc-len 96 --per-query 3 --tail 16 --queries 8 --gap 60 \
  --filler 2000 --calibrate --cache-dir "$TMP/cache" --json "$TMP/a.json" --html "$TMP/a.html" >"$TMP/out" 2>"$TMP/err"
rc=$?
check "runs and exits 0" '[ $rc -eq 0 ]'
[ $rc -eq 0 ] || { sed 's/^/    /' "$TMP/err" | tr '\r' '\n' | tail -20; }
check "every variant row has a numeric TTFT" \
  'for v in $VARIANTS; do grep -Eq "^\| $v +\| +[0-9]+\.[0-9] \| +[0-9]+\.[0-9] \| +[0-9]+\.[0-9] \|" "$TMP/out" || exit 1; done'
check "progress on stderr, per query" 'grep -q "query   8/8: TTFT" "$TMP/err"'
check "per-variant store directories removed" '[ -z "$(ls -A "$TMP/cache")" ]'
check "HTML report with charts" 'grep -q "<svg" "$TMP/a.html" && grep -q "static-no-merge" "$TMP/a.html"'

python3 - "$TMP/a.json" > "$TMP/py" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = {x["variant"]: x for x in d["variants"]}
def t(name, cond, who=()):
    print(("ok   " + name) if cond else ("FAIL " + name + ("  [" + counters(*who) + "]" if who else "")))
def counters(*names):
    # the figures a timing-dependent check read, printed when it fails
    keys = ["ram_hits", "flash_hits", "misses", "flash_bytes", "path_writes", "writes_in_commit"]
    return "; ".join(n + ": " + ", ".join("%s %s" % (k, v[n].get(k)) for k in keys) + ", pool " + str(v[n]["pool"])
                     for n in names)
names = ["full", "no-ram-pool", "naive-store", "lru-eviction", "no-pipeline", "sync-persist", "no-prefetch", "static",
         "static-fixed-shapes", "static-no-merge"]
t("json: every variant, in order", [x["variant"] for x in d["variants"]] == names)
t("json: workload parameters", d["docs"] == 8 and d["doc_len"] == 96 and d["per_query"] == 3 and d["queries"] == 8
  and d["warmup"] == 2 and d["filler"] == 2000 and d["max_tokens"] == 1 + 3 * 96 + 16)
fields = ["ttft_mean_ms", "ttft_p50_ms", "ttft_p95_ms", "vs_full", "ram_hits", "flash_hits", "misses", "flash_bytes",
          "load_ms", "load_exposed_ms", "path_writes", "commit_ms", "pad_rows", "pool", "ttft_ms"]
t("json: per-variant fields", all(x["ok"] and all(f in x for f in fields) for x in d["variants"]))
t("json: 6 timed TTFTs per variant, positive, p50 <= p95",
  all(len(x["ttft_ms"]) == 6 and min(x["ttft_ms"]) > 0 and x["ttft_p50_ms"] <= x["ttft_p95_ms"] for x in d["variants"]))
t("json: full is the reference (vs_full 1)", abs(v["full"]["vs_full"] - 1) < 1e-9)
t("json: vs_static only on static-fixed-shapes / static-no-merge",
  v["static-fixed-shapes"]["vs_static"] is not None and v["static-no-merge"]["vs_static"] is not None
  and v["full"]["vs_static"] is None and v["static"]["vs_static"] is None)
# the workload reuses: popular documents hit, and the RAM pool is too small for all of them
t("full: hits in RAM and on flash", v["full"]["ram_hits"] > 0 and v["full"]["flash_hits"] > 0, ["full"])
t("full: RAM evictions and flash writes", v["full"]["pool"]["evictions"] > 0 and v["full"]["pool"]["written"] > 0, ["full"])
# every hit is a flash load. Not compared with full's flash hits: a chunk whose write is still queued when the
# next query comes is a miss here (nothing holds it in RAM), so on a slow disk the count depends on the writer's pace
t("no-ram-pool: no RAM hits, hits loaded from flash",
  v["no-ram-pool"]["ram_hits"] == 0 and v["no-ram-pool"]["flash_hits"] > 0 and v["no-ram-pool"]["flash_bytes"] > 0, ["no-ram-pool", "full"])
t("sync-persist: flash writes on the request path, with time on the caller",
  v["sync-persist"]["writes_in_commit"] > 0 and v["sync-persist"]["write_ms_in_commit"] > 0
  and v["sync-persist"]["path_writes"] > v["full"]["path_writes"], ["sync-persist", "full"])
t("no-prefetch: nothing prefetched (full prefetches)",
  v["no-prefetch"]["pool"]["prefetched"] == 0 and v["full"]["pool"]["prefetched"] > 0, ["no-prefetch", "full"])
t("static rows report padding, dynamic rows none",
  all(v[n]["pad_rows"] > 0 for n in ["static", "static-fixed-shapes", "static-no-merge"])
  and all(v[n]["pad_rows"] == 0 for n in names[:7]))
t("static-fixed-shapes runs the default shapes", v["static-fixed-shapes"]["L_P"] == 128 and v["static-fixed-shapes"]["L_S"] == 512)
t("static runs the measured shapes", d["calibration"] == "measured" and v["static"]["L_P"] == d["L_P"] and v["static"]["L_S"] == d["L_S"])
t("the filler rows are in every store", all(x["store_bytes"] > 2000 * 512 for x in d["variants"]))
PY
report "$TMP/py"

# crafted workload (hot long documents + one-off short ones, both tiers smaller than the hot set): full and
# lru-eviction report hit rate, reuse and TTFT, and the budgets sampled per query. Counters, not timings.
"$BIN" bench ablation -m "$M" -t 1 --workload crafted --docs 4 --doc-len 512 --short 3 --short-len 32 --tail 16 \
  --queries 24 --gap 40 --variants full,lru-eviction --cache-dir "$TMP/cache" --json "$TMP/c.json" >"$TMP/cout" 2>"$TMP/cerr"
rc=$?
check "crafted: runs and exits 0" '[ $rc -eq 0 ]'
[ $rc -eq 0 ] || { sed 's/^/    /' "$TMP/cerr" | tr '\r' '\n' | tail -20; }
check "crafted: the table has hit %, reuse %, RSS and disk columns" \
  'grep -q "hit %" "$TMP/cout" && grep -q "reuse %" "$TMP/cout" && grep -q "RSS+ MiB" "$TMP/cout" && grep -q "disk max MiB" "$TMP/cout"'
check "crafted: bad --workload exits 2" '"$BIN" bench ablation -m "$M" --workload bogus >/dev/null 2>&1; [ $? -eq 2 ]'
python3 - "$TMP/c.json" > "$TMP/py" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
v = {x["variant"]: x for x in d["variants"]}
def t(name, cond):
    print(("ok   " if cond else "FAIL ") + name)
t("crafted json: workload parameters", d["workload"] == "crafted" and d["docs"] == 4 and d["doc_len"] == 512
  and d["short"] == 3 and d["short_len"] == 32 and d["max_tokens"] == 1 + 512 + 3 * 32 + 16)
# both tiers smaller than the hot set's KV (the condition under which the policies part ways)
t("crafted json: RAM and flash budgets below the hot set", 0 < d["ram_bytes"] < d["corpus_kv_bytes"]
  and 0 < d["disk_budget"] < d["corpus_kv_bytes"])
t("crafted json: full and lru-eviction, with hit rate / reuse / TTFT / budget fields",
  [x["variant"] for x in d["variants"]] == ["full", "lru-eviction"]
  and all(x["ok"] and all(k in x for k in ["hit_rate", "ram_hit_rate", "reuse_share", "ttft_mean_ms", "ttft_p50_ms",
                                          "rss_growth_max", "rss_growth_vs_ram", "pool_max", "disk_max", "disk_vs_budget"])
          for x in d["variants"]))
t("crafted json: hit rates in [0, 1], lookups per query > 0",
  all(0 <= x["hit_rate"] <= 1 and 0 <= x["reuse_share"] <= 1 and x["lookups"] > 0 for x in d["variants"]))
# both tiers were exercised: RAM evictions, flash evictions, hot documents reused in both variants
t("crafted json: RAM and flash evictions, hot documents reused",
  all(x["pool"]["evictions"] > 0 and x["pool"]["disk_evictions"] > 0 and x["reused_prefix"] > 0 for x in d["variants"]))
# the pool's accounted bytes (budget + transient) stay within the RAM budget + 10%, and the store within its budget + 10%
t("crafted json: pool within RAM budget +10%, store within flash budget +10% (sampled per query)",
  all(0 < x["pool_max"] <= 1.1 * d["ram_bytes"] and 0 < x["disk_max"] <= 1.1 * d["disk_budget"] for x in d["variants"]))
PY
report "$TMP/py"

# --keep leaves the store (a database the cache tools can read)
"$BIN" bench ablation -m "$M" -t 1 --docs 4 --doc-len 64 --per-query 2 --queries 3 --gap 0 --variants full \
  --cache-dir "$TMP/keep" --keep >/dev/null 2>&1; rc=$?
check "--keep keeps the store directory" '[ $rc -eq 0 ] && ls "$TMP"/keep/reprise-ablation-full-*/kv.db >/dev/null 2>&1'

finish
