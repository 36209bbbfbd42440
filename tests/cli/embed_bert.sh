#!/bin/bash
# embed_bert.sh — an encoder end to end: `reprise synth` writes tiny bert and nomic-bert files, `reprise embed`
# gives their vectors (the model's pooling, unit norm, a bare TEXT argument), `serve --embeddings` gives the same
# vectors over /v1/embeddings and refuses chat; `run` / `chat` / plain `serve` refuse the embedding model clearly.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
TMP="${RP_TEST_TMP:-/tmp}/embed_bert.$$"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed (reads the JSON)"; exit 77; }
mkdir -p "$TMP"
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT
unset REPRISE_API_KEY
. "$(dirname "$0")/lib/common.sh"
j() { python3 -c 'import json,sys,math; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

for arch in bert nomic-bert; do
  M="$TMP/$arch.gguf"
  "$BIN" synth --arch "$arch" --preset tiny --type q8_0 -o "$M" 2>"$TMP/e"; rc=$?
  check "$arch: synth tiny q8_0" '[ $rc -eq 0 ] && [ -s "$M" ]'
  "$BIN" inspect "$M" >"$TMP/i" 2>&1
  check "$arch: inspect names the architecture" "grep -q 'arch $arch' '$TMP/i'"
  want=cls; [ "$arch" = nomic-bert ] && want=mean
  "$BIN" embed -m "$M" "hello world" -p "The capital of France is Paris." >"$TMP/a.json" 2>"$TMP/e"; rc=$?
  check "$arch: embed TEXT -p TEXT: exit 0, two 128-float vectors" \
    '[ $rc -eq 0 ] && [ "$(j "$TMP/a.json" "[len(x[\"embedding\"]) for x in d[\"data\"]]")" = "[128, 128]" ]'
  check "$arch: the model's pooling ($want), unit norms" \
    '[ "$(j "$TMP/a.json" "d[\"pooling\"], all(abs(math.sqrt(sum(v*v for v in x[\"embedding\"])) - 1) < 1e-5 for x in d[\"data\"])")" = "('"'"'$want'"'"', True)" ]'
  check "$arch: [CLS] hello world [SEP] is 4 tokens" '[ "$(j "$TMP/a.json" "d[\"data\"][0][\"n_tokens\"]")" = 4 ]'
  "$BIN" run -m "$M" -p "hello" -n 4 >"$TMP/o" 2>"$TMP/e"; rc=$?
  check "$arch: run refuses an embedding model (exit != 0, says why)" '[ $rc -ne 0 ] && grep -q "embedding model" "$TMP/e"'
  echo "hi" | "$BIN" chat -m "$M" >"$TMP/o" 2>"$TMP/e"; rc=$?
  check "$arch: chat refuses it too" '[ $rc -ne 0 ] && grep -q "embedding model" "$TMP/e"'
  "$BIN" serve -m "$M" --port 0 -t 1 --quiet >"$TMP/o" 2>"$TMP/e"; rc=$?
  check "$arch: serve without --embeddings does not start, names --embeddings" '[ $rc -ne 0 ] && grep -q -- "--embeddings" "$TMP/e"'
  if command -v curl >/dev/null 2>&1; then
    rm -f "$TMP/port"
    "$BIN" serve -m "$M" --port 0 --port-file "$TMP/port" -t 1 --quiet --embeddings 2>"$TMP/serve.log" &
    SP=$!
    for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
    port=$(cat "$TMP/port" 2>/dev/null)
    curl -s "http://127.0.0.1:$port/v1/embeddings" -H "Content-Type: application/json" \
      -d '{"input": ["hello world", "The capital of France is Paris."]}' >"$TMP/s.json"
    check "$arch: serve --embeddings: the CLI's vectors (within 1e-6)" \
      'python3 -c "import json,sys; a=json.load(open(sys.argv[1])); s=json.load(open(sys.argv[2])); sys.exit(0 if len(s[\"data\"]) == 2 and all(max(abs(x-y) for x,y in zip(p[\"embedding\"], q[\"embedding\"])) < 1e-6 for p,q in zip(a[\"data\"], s[\"data\"])) else 1)" "$TMP/a.json" "$TMP/s.json"'
    code=$(curl -s -o "$TMP/c.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -H "Content-Type: application/json" \
      -d '{"messages": [{"role": "user", "content": "hi"}]}')
    check "$arch: serve --embeddings: chat completions answer 501, an embedding model" '[ "$code" = 501 ] && grep -q "embedding model" "$TMP/c.json"'
    kill -TERM "$SP"; wait "$SP" 2>/dev/null; SP=""
  else
    echo "SKIP serve --embeddings (no curl)"; skip=$((skip+1))
  fi
done
finish
