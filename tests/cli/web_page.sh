#!/bin/bash
# web_page.sh — GET / without a browser: the page embedded at build time is served byte for byte as
# src/server/web/index.html, with its type, ETag (304 on If-None-Match), no-cache and security headers, without an
# API key while the API keeps asking for one; HEAD and /index.html too, other methods 405, other paths 404.
# (web_ui.sh drives the page in chromium.)
set -u
. "$(dirname "$0")/lib/common.sh"
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || skip_all "$M not found (set RP_SHARED_DIR)"
command -v curl >/dev/null 2>&1 || skip_all "curl is not installed"
TMP="${RP_TEST_TMP:-/tmp}/web_page.$$"
mkdir -p "$TMP"
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT
"$BIN" serve -m "$M" --port 0 --port-file "$TMP/port" --quiet -t 1 --api-key page-key 2>"$TMP/serve.log" &
SP=$!
for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { cat "$TMP/serve.log"; bad "the server starts"; finish; exit 1; }
U="http://127.0.0.1:$(cat "$TMP/port")"
hdr() { tr -d '\r' <"$1" | grep -i "^$2:" | head -1 | cut -d' ' -f2-; }
code=$(curl -s -D "$TMP/h" -o "$TMP/page" -w '%{http_code}' "$U/")
check "GET / is 200 without a key" '[ "$code" = 200 ]'
check "the page is src/server/web/index.html, byte for byte" 'cmp -s "$TMP/page" "$HERE/src/server/web/index.html"'
check "Content-Type text/html; charset=utf-8" '[ "$(hdr "$TMP/h" content-type)" = "text/html; charset=utf-8" ]'
check "Cache-Control no-cache" '[ "$(hdr "$TMP/h" cache-control)" = "no-cache" ]'
check "a Content-Security-Policy that allows only this origin" 'hdr "$TMP/h" content-security-policy | grep -q "connect-src '"'"'self'"'"'" && hdr "$TMP/h" content-security-policy | grep -q "default-src '"'"'none'"'"'"'
check "nosniff, no framing" '[ "$(hdr "$TMP/h" x-content-type-options)" = nosniff ] && [ "$(hdr "$TMP/h" x-frame-options)" = DENY ]'
etag=$(hdr "$TMP/h" etag)
check "a strong ETag" '[[ "$etag" =~ ^\"[0-9a-f]{16}\"$ ]]'
code=$(curl -s -o "$TMP/b304" -w '%{http_code}' -H "If-None-Match: $etag" "$U/")
check "If-None-Match with it: 304, no body" '[ "$code" = 304 ] && [ ! -s "$TMP/b304" ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'If-None-Match: "0000000000000000", W/'"$etag" "$U/")
check "a list naming it (weak too): 304" '[ "$code" = 304 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'If-None-Match: "0000000000000000"' "$U/")
check "another ETag: 200" '[ "$code" = 200 ]'
code=$(curl -s -o "$TMP/p2" -w '%{http_code}' "$U/index.html")
check "/index.html is the page" '[ "$code" = 200 ] && cmp -s "$TMP/p2" "$TMP/page"'
len=$(curl -s -I "$U/" | tr -d '\r' | grep -i '^content-length:' | cut -d' ' -f2)
check "HEAD: the length, no body" '[ "$len" = "$(wc -c <"$TMP/page" | tr -d " ")" ]'
code=$(curl -s -o "$TMP/e" -D "$TMP/he" -w '%{http_code}' -X POST "$U/")
check "POST /: 405, Allow GET" '[ "$code" = 405 ] && [ "$(hdr "$TMP/he" allow)" = GET ]'
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/index.htm")
check "another path: 404" '[ "$code" = 404 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' "$U/v1/models")
check "the API still needs the key (401)" '[ "$code" = 401 ]'
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer page-key' "$U/v1/models")
check "and takes it (200)" '[ "$code" = 200 ]'
check "the page loads nothing from elsewhere" '! grep -Eiq "(src|href)=\"(https?:)?//" "$TMP/page"'
# its script parses (the browser test, web_ui.sh, runs it; this needs only node)
if command -v node >/dev/null 2>&1; then
  awk '/^<script>$/{on=1; next} /^<\/script>$/{on=0} on' "$TMP/page" >"$TMP/page.js"
  check "its script is JavaScript that parses (node --check)" '[ -s "$TMP/page.js" ] && node --check "$TMP/page.js"'
else
  skip=$((skip+1)); echo "skip its script parses (no node)"
fi
kill -TERM "$SP"; wait "$SP" || bad "the server exits 0 on SIGTERM"
SP=""
finish
