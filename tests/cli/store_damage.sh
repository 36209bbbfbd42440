#!/bin/bash
# store_damage.sh — a damaged KV store is never reused: deleted payloads, a flipped database header byte, truncated
# payload files and a read-only payload directory, through `reprise run` and `reprise serve` (both backends), in
# prefix and blend mode. Every answer must equal the one computed without a cache, and `cache verify` afterwards must
# report the truth (damage that is still there is reported; chunks it calls ok really reuse and give the same text).
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/store_damage.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP store damage checks: $M not found (set RP_SHARED_DIR)"; echo "0 passed, 0 failed, 1 skipped"; exit 77; }
for t in python3 curl; do
  command -v $t >/dev/null 2>&1 || { echo "SKIP store damage checks: $t not found"; echo "0 passed, 0 failed, 1 skipped"; exit 77; }
done
mkdir -p "$TMP"
SP=""
cleanup() {
  [ -n "$SP" ] && kill -9 "$SP" 2>/dev/null
  command -v chattr >/dev/null 2>&1 && chattr -R -i "$TMP" 2>/dev/null
  chmod -R u+w "$TMP" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
[ -n "${RP_KEEP_TMP:-}" ] && trap - EXIT
unset REPRISE_API_KEY
. "$(dirname "$0")/lib/common.sh"

# the last stats line's field
# verify DIR: "<ok> <corrupt> <database ok|DAMAGED>" from `reprise cache verify`
verify() {
  "$BIN" cache verify --cache-dir "$1" >"$TMP/verify.out" 2>&1
  echo "$(sed -n 's/^verified [0-9]* chunks: \([0-9]*\) ok, \([0-9]*\) corrupt.*/\1 \2/p' "$TMP/verify.out")" \
       "$(sed -n 's/^database: \([A-Za-z]*\).*/\1/p' "$TMP/verify.out")"
}
# truth DIR: rows whose payload file is missing or not the size the row says, counted independently of reprise
# (the damage the file-level kinds do; BLOB rows live in the database)
truth() {
  python3 - "$1" <<'EOF'
import os, sqlite3, sys
d = sys.argv[1]
bad = 0
for rid, cks, loc, size in sqlite3.connect("file:%s/kv.db?mode=ro" % d, uri=True).execute(
        "SELECT id, checksum, loc, stored_bytes FROM chunks"):
    if loc != 1:
        continue
    p = "%s/kv/%02x/%d-%016x.kv" % (d, rid & 0xFF, rid, cks & (2**64 - 1))
    if not os.path.exists(p) or os.path.getsize(p) < size:
        bad += 1
print(bad)
EOF
}
# failed loads of a run: the engine's (stats load_failed) plus the pool's (the "cache:" line; the prefetcher may meet
# the damage first)
failed_loads() {
  local a b
  a=$(stats_of "$1" load_failed)
  b=$(sed -n 's/^cache: .*failed loads \([0-9]*\).*/\1/p' "$1" | tail -n 1)
  echo $(( ${a:-0} + ${b:-0} ))
}

# Documents that make payload files (long ones) and SQLite BLOBs (short ones, under 16 KiB of KV); prompts stay
# within the model's 512-token context.
python3 - "$TMP" <<'EOF'
import json, sys
d = sys.argv[1]
sysmsg = "You are a story teller. Read the stories and answer the question at the end."
docs = ["Story %d: Once upon a time there was a little girl named Lily%d. She loved to play outside in the park "
        "with her big red ball, and every day she ran to the pond to see the ducks. " % (i, i) for i in range(4)]
docs[1:1] = ["Tom has a cat."]
docs[3:3] = ["Max saw a red bird."]
json.dump([sysmsg] + docs + [" Who is Lily?"], open(d + "/A.json", "w"))
# a sibling: the same system text up to its last words, so its first chunk shares a head with A's (after A's own
# chunks fail to load, the partial-match lookup offers this one: it must be checked as well)
sib = sysmsg.replace("at the end.", "at once, now.")
json.dump([sib] + docs[1:] + [" Who is Tom?"], open(d + "/S.json", "w"))
json.dump([sysmsg] + docs[3:] + docs[:3] + [" Who went to the pond?"], open(d + "/B.json", "w"))
req = {"messages": [{"role": "system", "content": sysmsg}, {"role": "user", "content": "Who is Lily?"}],
       "reprise_documents": docs, "max_tokens": 24, "temperature": 0}
json.dump(req, open(d + "/req.json", "w"))
req["messages"][0]["content"] = sib
json.dump(req, open(d + "/req_sib.json", "w"))
EOF

# damage KIND DIR: breaks a populated store the way an operator's disk or hands would
can_freeze=1
damage() {
  case "$1" in
    deleted)   rm -rf "$2/kv" ;;
    header)    printf '\x01' | dd of="$2/kv.db" bs=1 seek=20 conv=notrunc 2>/dev/null ;;   # SQLite reserved-bytes field
    truncated) find "$2/kv" -name '*.kv' -exec truncate -s 1000 {} \; ;;
    readonly)  if [ "$(id -u)" = 0 ]; then chattr +i "$2/kv" "$2"/kv/* 2>/dev/null || can_freeze=0; else chmod -R a-w "$2/kv"; fi ;;
  esac
}
undamage() { [ "$1" = readonly ] && { chattr -R -i "$2" 2>/dev/null; chmod -R u+w "$2" 2>/dev/null; }; return 0; }

RUN=("$BIN" run -m "$M" -n 24 --temp 0 -t 1)
"${RUN[@]}" --segments "$TMP/A.json" --reuse none >"$TMP/plainA.txt" 2>/dev/null
"${RUN[@]}" --segments "$TMP/B.json" --reuse none >"$TMP/plainB.txt" 2>/dev/null
check "plain runs produce text" '[ -s "$TMP/plainA.txt" ] && [ -s "$TMP/plainB.txt" ]'

# ---- reprise run --------------------------------------------------------------------------------------------
for kind in deleted header truncated readonly; do
  for mode in prefix blend; do
    D="$TMP/run-$kind-$mode"
    "${RUN[@]}" --segments "$TMP/S.json" --reuse "$mode" --cache-dir "$D" >/dev/null 2>"$D.seed.err"
    "${RUN[@]}" --segments "$TMP/A.json" --reuse "$mode" --cache-dir "$D" >/dev/null 2>>"$D.seed.err"
    n0=$(verify "$D")
    can_freeze=1
    damage "$kind" "$D"
    if [ "$can_freeze" = 0 ]; then skip=$((skip+1)); echo "skip run $kind/$mode: chattr +i is not supported here"; undamage "$kind" "$D"; continue; fi
    ok_all=1; failed_seen=0
    # the damaged prompt three times (the first run meets the damage, later ones what it left), then a reordered one
    for p in A A A B; do
      "${RUN[@]}" --segments "$TMP/$p.json" --reuse "$mode" --cache-dir "$D" >"$D.out" 2>"$D.err"
      cmp -s "$D.out" "$TMP/plain$p.txt" || { ok_all=0; echo "     $kind/$mode prompt $p differs: $(tail -n 1 "$D.err" | cut -c1-200)"; }
      [ "$(failed_loads "$D.err")" -gt 0 ] && failed_seen=1
    done
    check "run $kind/$mode: every answer equals the uncached one" '[ $ok_all = 1 ]'
    case "$kind" in
      readonly) check "run $kind/$mode: nothing is damaged, nothing fails to load" '[ $failed_seen = 0 ]' ;;
      *)        check "run $kind/$mode: the failed loads are reported" '[ $failed_seen = 1 ]' ;;
    esac
    undamage "$kind" "$D"
    read -r vok vbad vdb <<<"$(verify "$D")"
    echo "     $kind/$mode: verify before damage: $n0; after the runs: $vok ok, $vbad corrupt, database $vdb"
    # the runs deleted the damaged rows they met (rows no run touched stay damaged, and verify must say so); a
    # database SQLite called corrupt was set aside by the next run and replaced
    tb=$(truth "$D")
    check "run $kind/$mode: verify reports exactly the damaged rows ($vbad corrupt, $tb with a missing or short file)" \
      '[ "$vbad" = "$tb" ] && [ "$vok" -gt 0 ] && [ "$vdb" = ok ]'
    [ "$kind" = header ] && check "run $kind/$mode: the damaged database was set aside in DIR/damaged" '[ -f "$D/damaged/kv.db" ]'
    # what verify calls ok is really reusable: the next run reuses the prompt and still gives the same text
    "${RUN[@]}" --segments "$TMP/A.json" --reuse "$mode" --cache-dir "$D" >"$D.out" 2>"$D.err"
    r=$(stats_of "$D.err" reused_prefix); nf=$(failed_loads "$D.err")
    check "run $kind/$mode: afterwards the store is reused (prefix $r) with the same text" \
      '[ -n "$r" ] && [ "$r" -gt 0 ] && cmp -s "$D.out" "$TMP/plainA.txt"'
    check "run $kind/$mode: afterwards no load fails" '[ "$nf" = 0 ]'
  done
done

# ---- reprise serve ------------------------------------------------------------------------------------------
# start_server DIR PARALLEL [extra args]: starts serve on an ephemeral port; sets SP and PORT
start_server() {
  local d="$1" par="$2"; shift 2
  rm -f "$TMP/port"
  "$BIN" serve -m "$M" --port 0 --port-file "$TMP/port" --quiet -t 1 --parallel "$par" "$@" 2>>"$TMP/serve.log" &
  SP=$!
  for _ in $(seq 200); do [ -s "$TMP/port" ] && break; kill -0 "$SP" 2>/dev/null || break; sleep 0.05; done
  PORT=$(cat "$TMP/port" 2>/dev/null)
}
stop_server() { [ -n "$SP" ] && { kill -TERM "$SP"; wait "$SP" 2>/dev/null; SP=""; }; }
# ask MODE OUT [USAGE [REQ]]: one chat request with the documents (REQ: req.json), the answer's text in OUT (its usage
# object in USAGE)
ask() {
  python3 - "$TMP/${4:-req.json}" "$1" > "$TMP/req.mode.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); r["reprise_cache"] = {"mode": sys.argv[2]}
print(json.dumps(r))
EOF
  curl -s -m 120 "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d @"$TMP/req.mode.json" > "$TMP/resp.json"
  python3 - "$TMP/resp.json" "${3:-/dev/null}" > "$2" 2>/dev/null <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
json.dump(r.get("usage", {}), open(sys.argv[2], "w"))
print(r["choices"][0]["message"]["content"])
EOF
}

start_server "" 1
ask none "$TMP/plain_serve.txt"
stop_server
check "serve: an uncached answer" '[ -s "$TMP/plain_serve.txt" ]'

for par in 1 2; do
  for kind in deleted header truncated readonly; do
    for mode in prefix blend; do
      D="$TMP/serve-$par-$kind-$mode"
      start_server "$D" "$par" --cache-dir "$D"
      ask "$mode" "$D.seed" /dev/null req_sib.json
      ask "$mode" "$D.seed"
      stop_server
      can_freeze=1
      damage "$kind" "$D"
      if [ "$can_freeze" = 0 ]; then skip=$((skip+1)); echo "skip serve $kind/$mode: chattr +i is not supported here"; undamage "$kind" "$D"; continue; fi
      start_server "$D" "$par" --cache-dir "$D"
      same=1
      for i in 1 2 3; do
        ask "$mode" "$D.out"
        cmp -s "$D.out" "$TMP/plain_serve.txt" || { same=0; echo "     serve --parallel $par $kind/$mode answer $i: $(head -c 120 "$D.out")"; }
      done
      stop_server
      check "serve --parallel $par $kind/$mode: every answer equals the uncached one" '[ $same = 1 ] && [ -s "$TMP/plain_serve.txt" ]'
      undamage "$kind" "$D"
      read -r vok vbad vdb <<<"$(verify "$D")"
      if [ "$kind" = header ]; then
        # the server met the damage and stopped writing; the database is reported until the next start sets it aside
        check "serve --parallel $par $kind/$mode: verify reports the damaged database" '[ "$vdb" = DAMAGED ]'
      else
        tb=$(truth "$D")
        check "serve --parallel $par $kind/$mode: verify reports exactly the damaged rows ($vbad corrupt, $tb with a missing or short file)" \
          '[ "$vbad" = "$tb" ] && [ "$vok" -gt 0 ] && [ "$vdb" = ok ]'
      fi
      # what is left is really reusable: a new server reuses it and answers the same
      start_server "$D" "$par" --cache-dir "$D"
      ask "$mode" "$D.out" "$D.usage"
      [ "$kind" = header ] && ask "$mode" "$D.out" "$D.usage"   # the store started empty: fill it, then reuse
      stop_server
      [ "$kind" = header ] && check "serve --parallel $par $kind/$mode: the damaged database was set aside" '[ -f "$D/damaged/kv.db" ]'
      r=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["reprise"]["reused_prefix"])' "$D.usage" 2>/dev/null)
      check "serve --parallel $par $kind/$mode: afterwards the store is reused (prefix $r) with the same answer" \
        '[ -n "$r" ] && [ "$r" -gt 0 ] && cmp -s "$D.out" "$TMP/plain_serve.txt"'
    done
  done
done

finish
