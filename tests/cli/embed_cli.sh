#!/bin/bash
# embed_cli.sh — `reprise embed`: one JSON object with a vector per input (unit norm by default), per-token vectors
# with --pooling none, the same vectors the server's /v1/embeddings gives, and the option errors.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/embed_cli.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed (reads the JSON)"; exit 77; }
mkdir -p "$TMP"
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT
unset REPRISE_API_KEY
. "$(dirname "$0")/lib/common.sh"
# j FILE EXPR: a Python expression over the JSON in FILE (as `d`)
j() { python3 -c 'import json,sys,math; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

"$BIN" embed -m "$M" -p "Once upon a time" -p "The dog ran." >"$TMP/a.json" 2>"$TMP/e"; rc=$?
check "two inputs: exit 0, JSON with two 64-float vectors" \
  '[ $rc -eq 0 ] && [ "$(j "$TMP/a.json" "[len(x[\"embedding\"]) for x in d[\"data\"]]")" = "[64, 64]" ]'
check "default: mean pooling, unit norms" \
  '[ "$(j "$TMP/a.json" "d[\"pooling\"], all(abs(math.sqrt(sum(v*v for v in x[\"embedding\"])) - 1) < 1e-5 for x in d[\"data\"])")" = "('"'"'mean'"'"', True)" ]'
"$BIN" embed -m "$M" -p "The dog ran." --pooling none --no-normalize >"$TMP/n.json" 2>"$TMP/e"; rc=$?
check "--pooling none: one vector per token, n_tokens of them" \
  '[ $rc -eq 0 ] && [ "$(j "$TMP/n.json" "len(d[\"data\"][0][\"embedding\"]) == d[\"data\"][0][\"n_tokens\"] > 1")" = True ]'
check "--pooling none --no-normalize: not unit norm" \
  '[ "$(j "$TMP/n.json" "d[\"normalized\"], abs(math.sqrt(sum(v*v for v in d[\"data\"][0][\"embedding\"][0])) - 1) > 1e-3")" = "(False, True)" ]'
"$BIN" embed -m "$M" -p "x" --pooling max >/dev/null 2>"$TMP/e"; rc=$?
check "--pooling max is an error (exit 2)" '[ $rc -eq 2 ] && grep -q "mean, cls, last or none" "$TMP/e"'
"$BIN" embed -m "$M" >/dev/null 2>"$TMP/e"; rc=$?
check "no -p is an error (exit 2)" '[ $rc -eq 2 ]'
"$BIN" embed -m "$M" -p "" >/dev/null 2>"$TMP/e"; rc=$?
check "an empty -p is an error (exit 2)" '[ $rc -eq 2 ] && grep -q "input 0 is empty" "$TMP/e"'

# ---- the server gives the same vectors
if command -v curl >/dev/null 2>&1; then
  "$BIN" serve -m "$M" --port 0 --port-file "$TMP/port" -t 1 --quiet --embeddings 2>"$TMP/serve.log" &
  SP=$!
  for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
  port=$(cat "$TMP/port" 2>/dev/null)
  curl -s "http://127.0.0.1:$port/v1/embeddings" -H "Content-Type: application/json" \
    -d '{"input": ["Once upon a time", "The dog ran."]}' >"$TMP/s.json"
  check "serve --embeddings: the CLI's vectors (within 1e-6)" \
    'python3 -c "import json,sys; a=json.load(open(sys.argv[1])); s=json.load(open(sys.argv[2])); sys.exit(0 if all(max(abs(x-y) for x,y in zip(p[\"embedding\"], q[\"embedding\"])) < 1e-6 for p,q in zip(a[\"data\"], s[\"data\"])) and len(s[\"data\"]) == 2 else 1)" "$TMP/a.json" "$TMP/s.json"'
  kill -TERM "$SP"; wait "$SP" 2>/dev/null; SP=""
else
  echo "SKIP serve --embeddings (no curl)"; skip=$((skip+1))
fi
finish
