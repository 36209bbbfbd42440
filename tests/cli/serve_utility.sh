#!/bin/bash
# serve_utility.sh — `serve` as a llama-server user meets it: --parallel auto (the default) and what it chose,
# /tokenize -> /detokenize, /props, --cors (preflight headers for an allowed origin, none for another), logprobs,
# and the option errors.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/serve_utility.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed (reads the JSON)"; exit 77; }
mkdir -p "$TMP"
. "$(dirname "$0")/lib/server.sh"
serve_trap
unset REPRISE_API_KEY
. "$(dirname "$0")/lib/common.sh"
# j FILE EXPR: a Python expression over the JSON in FILE (as `d`)
j() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# ---- option errors
"$BIN" serve -m "$M" --cors "" --port 0 >/dev/null 2>"$TMP/e"; rc=$?
check "--cors '' is an error (exit 2)" '[ $rc -eq 2 ] && grep -q "cors needs an origin" "$TMP/e"'
"$BIN" serve -m "$M" --parallel lots --port 0 >/dev/null 2>"$TMP/e"; rc=$?
check "--parallel takes a number or auto (exit 2)" '[ $rc -eq 2 ]'
check "--help describes --parallel auto and --cors" \
  '"$BIN" serve --help | grep -q -- "--parallel N|auto" && "$BIN" serve --help | grep -q -- "--cors ORIGIN"'

# ---- the default server (no --parallel): auto, said at start and in /props
serve_up 0 -t 1 --cors http://app.test --cors 'http://two.test:8000'
U="http://127.0.0.1:$port"
check "the start said it accepted connections before loading" 'grep -q "accepting connections on port $port while the model loads" "$TMP/serve.log"'
par=$(sed -n 's/.*(backend [a-z]*, parallel \([0-9]*\),.*/\1/p' "$TMP/serve.log")
check "the start said the KV memory per sequence before allocating it" \
  'grep -q "context [0-9]* tokens: KV cache up to [0-9.]* MiB per sequence, $par sequences* decoded together" "$TMP/serve.log"'
cores=$(nproc 2>/dev/null || echo 1)
check "--parallel auto: 1..4, at most cores / 2 (or 1): $par on $cores cores" \
  '[ -n "$par" ] && [ "$par" -ge 1 ] && [ "$par" -le 4 ] && { [ "$par" -eq 1 ] || [ "$par" -le $((cores / 2)) ]; }'
curl -s "$U/props" >"$TMP/props.json"
check "/props total_slots is what the start line said" '[ "$(j "$TMP/props.json" "d[\"total_slots\"]")" = "$par" ]'
check "/props names the model file and the build" \
  '[ "$(j "$TMP/props.json" "d[\"model_path\"].endswith(\"stories260K.gguf\") and d[\"build_info\"].startswith(\"reprise-\")")" = True ]'

# ---- tokenize -> detokenize
curl -s "$U/tokenize" -d '{"content": "The little cat sat on the mat."}' >"$TMP/tok.json"
check "/tokenize gives ids" '[ "$(j "$TMP/tok.json" "all(isinstance(t, int) for t in d[\"tokens\"]) and len(d[\"tokens\"]) > 3")" = True ]'
curl -s "$U/detokenize" -d @"$TMP/tok.json" >"$TMP/detok.json"
check "/detokenize gives the text back" '[ "$(j "$TMP/detok.json" "d[\"content\"].strip()")" = "The little cat sat on the mat." ]'

# ---- CORS
curl -si -X OPTIONS "$U/v1/chat/completions" -H 'Origin: http://two.test:8000' \
  -H 'Access-Control-Request-Method: POST' | tr -d '\r' >"$TMP/pre.txt"
check "preflight: 204 with the allowed origin, methods, headers, max-age" \
  'grep -q "^HTTP/1.1 204" "$TMP/pre.txt" && grep -qx "Access-Control-Allow-Origin: http://two.test:8000" "$TMP/pre.txt" &&
   grep -qx "Access-Control-Allow-Methods: POST, OPTIONS" "$TMP/pre.txt" &&
   grep -qx "Access-Control-Allow-Headers: Authorization, Content-Type" "$TMP/pre.txt" &&
   grep -qx "Access-Control-Max-Age: 86400" "$TMP/pre.txt"'
curl -si -X OPTIONS "$U/v1/chat/completions" -H 'Origin: http://evil.test' -H 'Access-Control-Request-Method: POST' \
  | tr -d '\r' >"$TMP/pre2.txt"
check "preflight from another origin: no CORS header" '! grep -qi "^Access-Control-" "$TMP/pre2.txt"'
curl -si -N "$U/v1/chat/completions" -H 'Origin: http://app.test' \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": true}' | tr -d '\r' >"$TMP/sse.txt"
check "an SSE stream to an allowed origin carries the header" \
  'grep -qx "Access-Control-Allow-Origin: http://app.test" "$TMP/sse.txt" && grep -q "data: \[DONE\]" "$TMP/sse.txt"'

# ---- logprobs: greedy tokens are their position's most likely
curl -s "$U/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 6,
  "temperature": 0, "logprobs": true, "top_logprobs": 4}' >"$TMP/lp.json"
check "logprobs: each greedy token's logprob is the largest of its top_logprobs" \
  '[ "$(j "$TMP/lp.json" "all(abs(e[\"logprob\"] - max(a[\"logprob\"] for a in e[\"top_logprobs\"])) < 1e-6 and len(e[\"top_logprobs\"]) == 4 for e in d[\"choices\"][0][\"logprobs\"][\"content\"]) and len(d[\"choices\"][0][\"logprobs\"][\"content\"]) > 0")" = True ]'

serve_stop; rc=$?
check "SIGTERM stops it cleanly" '[ $rc -eq 0 ]'
finish
