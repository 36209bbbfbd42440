#!/bin/bash
# openai_client.sh — runs tests/client (the official openai npm client, Node >= 20) against `reprise serve`: the
# basics on stories260K, then structured.test.mjs on a synthetic Llama 3 model at --parallel 1, 4 and 4 with a draft;
# installs the pinned package with `npm ci` into a temp dir; skips when node, npm or the registry is unavailable.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="${RP_TEST_TMP:-/tmp}/openai_client.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
command -v node >/dev/null 2>&1 || { echo "SKIP: node is not installed (the openai client test needs Node >= 20)"; exit 77; }
command -v npm >/dev/null 2>&1 || { echo "SKIP: npm is not installed"; exit 77; }
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$major" -ge 20 ] 2>/dev/null || { echo "SKIP: node $(node --version) is older than 20"; exit 77; }
mkdir -p "$TMP"
. "$(dirname "$0")/lib/server.sh"
serve_trap
cp "$HERE/tests/client/package.json" "$HERE/tests/client/package-lock.json" "$HERE/tests/client/openai_client.test.mjs" \
   "$HERE/tests/client/structured.test.mjs" "$TMP/"
if ! (cd "$TMP" && timeout 180 npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm.log" 2>&1); then
  echo "SKIP: npm ci failed (registry unreachable?):"; tail -5 "$TMP/npm.log"; exit 77
fi
KEY="client-test-key"
serve_up 0 --quiet -t 1 --api-key "$KEY"
rc=0
(cd "$TMP" && REPRISE_URL="http://127.0.0.1:$port/v1" REPRISE_KEY="$KEY" timeout 300 node --test openai_client.test.mjs) || rc=1
serve_stop || rc=1
# structured output, strict tools, logprobs, n, embeddings: a synthetic model with the real Llama 3 vocabulary and
# chat template (peaked, so replies are not uniform noise), served three ways
V="$SHARED/models/vocab/llama3-bpe.vocab.gguf"
if [ ! -f "$V" ]; then
  echo "SKIP (part): $V not found: the structured-output checks did not run"
else
  "$BIN" synth --arch llama --preset tiny-llama3 --type q8_0 --vocab "$V" --peak 3 -o "$TMP/synth.gguf" 2>"$TMP/synth.log" &&
    "$BIN" synth --arch llama --preset tiny-llama3 --type q4_0 --vocab "$V" --peak 3 --seed 2 -o "$TMP/draft.gguf" \
      2>>"$TMP/synth.log" || { echo "FAIL: synth"; cat "$TMP/synth.log"; exit 1; }
  M="$TMP/synth.gguf"
  for setup in "parallel 1" "parallel 4" "parallel 4, draft"; do
    case "$setup" in
      "parallel 1") args="--parallel 1" ;;
      "parallel 4") args="--parallel 4" ;;
      *) args="--parallel 4 --draft $TMP/draft.gguf" ;;
    esac
    # shellcheck disable=SC2086
    serve_up 0 --quiet -t 1 --api-key "$KEY" --embeddings --model-id synth $args
    (cd "$TMP" && REPRISE_URL="http://127.0.0.1:$port/v1" REPRISE_KEY="$KEY" REPRISE_SETUP="$setup" \
      timeout 300 node --test structured.test.mjs) || { rc=1; echo "FAIL: structured checks with --$setup"; }
    serve_stop || rc=1
  done
fi
[ "$rc" -eq 0 ] && echo "openai_client: all checks passed" || echo "FAIL: openai client test"
exit "$rc"
