#!/bin/bash
# web_ui.sh — the built-in web page (GET /) in a real browser: Debian's chromium, headless, driven by playwright-core
# from npm (tests/web, pinned by its package-lock.json, installed with `npm ci` into a temp dir). Starts
# `reprise serve` on stories260K with an API key; tests/web/web_ui.test.mjs says what is checked.
# Without ../shared it serves a synthetic model (`reprise synth --preset small`, as the demo does), so CI runs it.
# Skips (77) when node >= 20, npm, chromium or the npm registry is missing.
#   RP_WEB_INSTALL=1   apt-get chromium when it is missing (root or passwordless sudo; .ci/run sets it), the way
#                      scripts/arm_test.sh --install does for its packages
#   RP_CHROMIUM=PATH   the browser (default: chromium, or chromium-browser, on PATH)
#   RP_WEB_SCREENSHOT=PATH   where the screenshot goes (default: the test's temp dir, removed at the end);
#                      docs/web-ui.png is made with RP_WEB_SCREENSHOT=$PWD/docs/web-ui.png
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="${RP_TEST_TMP:-/tmp}/web_ui.$$"
M="$SHARED/models/stories260K.gguf"
command -v node >/dev/null 2>&1 || { echo "SKIP: node is not installed (the web page test needs Node >= 20)"; exit 77; }
command -v npm >/dev/null 2>&1 || { echo "SKIP: npm is not installed"; exit 77; }
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$major" -ge 20 ] 2>/dev/null || { echo "SKIP: node $(node --version) is older than 20"; exit 77; }
find_chromium() { command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null; }
CHROME="${RP_CHROMIUM:-$(find_chromium)}"
if [ -z "$CHROME" ] && [ "${RP_WEB_INSTALL:-0}" = 1 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
  else echo "SKIP: chromium is not installed, and there is no root / passwordless sudo to install it"; exit 77
  fi
  echo "web_ui: installing chromium (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends chromium; } >&2 ||
    { echo "SKIP: apt-get could not install chromium (no network?)"; exit 77; }
  CHROME="$(find_chromium)"
fi
[ -n "${RP_CHROMIUM:-}" ] && [ ! -x "$CHROME" ] && { echo "SKIP: RP_CHROMIUM=$RP_CHROMIUM is not an executable"; exit 77; }
[ -n "$CHROME" ] ||
  { echo "SKIP: chromium is not installed (apt-get install chromium, or RP_WEB_INSTALL=1, or RP_CHROMIUM=PATH)"; exit 77; }
mkdir -p "$TMP"
if [ ! -f "$M" ]; then
  # no ../shared (a clean CI clone): the embedded default, as `reprise demo` makes it (random weights, built-in vocab)
  M="$TMP/small-q8_0.gguf"
  "$BIN" synth --preset small --type q8_0 -o "$M" >/dev/null 2>&1 || { echo "FAIL: reprise synth could not make $M"; exit 1; }
  echo "web_ui: no stories260K under $SHARED/models: using a synthetic model ($M)"
fi
. "$(dirname "$0")/lib/server.sh"
serve_trap
cp "$HERE/tests/web/package.json" "$HERE/tests/web/package-lock.json" "$HERE/tests/web/web_ui.test.mjs" "$TMP/"
if ! (cd "$TMP" && timeout 180 npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm.log" 2>&1); then
  echo "SKIP: npm ci failed (registry unreachable?):"; tail -5 "$TMP/npm.log"; exit 77
fi
KEY="web-ui-test-key"
serve_up 0 --quiet -t 1 --api-key "$KEY"
shot="${RP_WEB_SCREENSHOT:-$TMP/web-ui.png}"
rc=0
(cd "$TMP" && HOME="$TMP" REPRISE_MODEL="$(basename "$M" .gguf)" REPRISE_URL="http://127.0.0.1:$port" REPRISE_KEY="$KEY" CHROMIUM="$CHROME" SCREENSHOT="$shot" \
   timeout 150 node --test web_ui.test.mjs) || rc=1
[ -s "$shot" ] || { echo "FAIL: no screenshot at $shot"; rc=1; }
serve_stop || rc=1
[ "$rc" -eq 0 ] && echo "web_ui: all checks passed (browser: $CHROME)" || { echo "FAIL: web page test"; tail -20 "$TMP/serve.log"; }
exit "$rc"
