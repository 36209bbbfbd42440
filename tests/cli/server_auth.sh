#!/bin/bash
# server_auth.sh — `serve` API keys: an empty key (flag or REPRISE_API_KEY) is an error, --api-key-file (private,
# several keys, none in the process list), --cache-namespace, the per-key limits, and what --help says about them.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/server_auth.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 77; }
mkdir -p "$TMP"
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT
unset REPRISE_API_KEY
. "$(dirname "$0")/lib/common.sh"
# refused NAME RC PATTERN CMD...: the command exits with RC and its stderr matches PATTERN
refused() {
  local name="$1" want="$2" pat="$3"; shift 3
  timeout 60 "$@" >/dev/null 2>"$TMP/e"; local rc=$?   # (a server that starts after all is stopped: rc 124)
  if [ $rc -eq "$want" ] && grep -q -- "$pat" "$TMP/e"; then ok "$name"; else bad "$name (rc $rc: $(head -c 300 "$TMP/e"))"; fi
}
# serve_bg ARGS...: starts serve in the background on a free port; sets SP and port
serve_bg() {
  rm -f "$TMP/port"
  "$BIN" serve -m "$M" --port 0 --port-file "$TMP/port" --quiet -t 1 "$@" 2>"$TMP/serve.log" &
  SP=$!
  for _ in $(seq 100); do [ -s "$TMP/port" ] && break; kill -0 "$SP" 2>/dev/null || break; sleep 0.1; done
  port=$(cat "$TMP/port" 2>/dev/null)
  [ -n "$port" ]
}
serve_stop() { kill "$SP" 2>/dev/null; wait "$SP" 2>/dev/null; SP=""; }
# code KEY: the HTTP status of GET /v1/models with that bearer key (none when empty)
code() {
  if [ -n "${1:-}" ]; then curl -s -o /dev/null -w '%{http_code}' -m 30 -H "Authorization: Bearer $1" "http://127.0.0.1:$port/v1/models"
  else curl -s -o /dev/null -w '%{http_code}' -m 30 "http://127.0.0.1:$port/v1/models"; fi
}

# ---- an empty key never means "no authentication"
refused "--api-key '' is an error" 2 "empty" "$BIN" serve -m "$M" --api-key "" --port 0
refused "an empty REPRISE_API_KEY is an error" 2 "REPRISE_API_KEY is set but empty" env REPRISE_API_KEY= "$BIN" serve -m "$M" --port 0
printf 'alice:k1\ncarol:\n' > "$TMP/keys-empty"; chmod 600 "$TMP/keys-empty"
refused "an empty key in the key file is an error, with its line" 1 "keys-empty:2: the API key is empty" \
  "$BIN" serve -m "$M" --api-key-file "$TMP/keys-empty" --port 0
printf 'alice:k1\n' > "$TMP/keys-loose"; chmod 644 "$TMP/keys-loose"
refused "a group/world-readable key file is refused" 1 "chmod 600" "$BIN" serve -m "$M" --api-key-file "$TMP/keys-loose" --port 0
refused "a missing key file is refused" 1 "no-such-file" "$BIN" serve -m "$M" --api-key-file "$TMP/no-such-file" --port 0
refused "--cache-namespace takes per-key or shared" 2 "per-key or shared" "$BIN" serve -m "$M" --cache-namespace all --port 0
refused "--cache-namespace per-key needs keys" 1 "needs API keys" "$BIN" serve -m "$M" --cache-namespace per-key --port 0
refused "--key-sessions 0 is rejected" 2 "--key-sessions" "$BIN" serve -m "$M" --key-sessions 0 --port 0

# ---- a key file with two keys: each works, nothing else does, and no key is in the process list
printf '# two tenants\nalice:key-alice-0123\nbob:key-bob-4567\n' > "$TMP/keys"; chmod 600 "$TMP/keys"
if serve_bg --api-key-file "$TMP/keys"; then
  ok "serve --api-key-file starts"
  grep -q "2 API keys, per-key cache" "$TMP/serve.log" && ok "the start line names 2 keys and the per-key cache" ||
    bad "the start line names the keys ($(cat "$TMP/serve.log"))"
  [ "$(code key-alice-0123)" = 200 ] && [ "$(code key-bob-4567)" = 200 ] && ok "both keys are accepted" || bad "both keys are accepted"
  [ "$(code)" = 401 ] && [ "$(code key-eve)" = 401 ] && ok "no key / another key: 401" || bad "no key / another key: 401"
  if tr '\0' ' ' < "/proc/$SP/cmdline" | grep -q "key-alice"; then bad "keys are not in /proc/PID/cmdline"
  else ok "keys are not in /proc/PID/cmdline"; fi
  serve_stop
else bad "serve --api-key-file starts ($(cat "$TMP/serve.log"))"; serve_stop; fi
if serve_bg --api-key-file "$TMP/keys" --cache-namespace shared --key-sessions 2 --key-kv-mb 64; then
  grep -q "2 API keys, shared cache" "$TMP/serve.log" && ok "--cache-namespace shared is reported" || bad "--cache-namespace shared ($(cat "$TMP/serve.log"))"
  serve_stop
else bad "serve with --cache-namespace shared --key-sessions --key-kv-mb starts ($(cat "$TMP/serve.log"))"; serve_stop; fi

# ---- REPRISE_API_KEY: one key, used when no option names keys
if REPRISE_API_KEY=env-key-89ab serve_bg; then
  grep -q "1 API key, shared cache" "$TMP/serve.log" && ok "REPRISE_API_KEY: one key" || bad "REPRISE_API_KEY: one key ($(cat "$TMP/serve.log"))"
  [ "$(code env-key-89ab)" = 200 ] && [ "$(code)" = 401 ] && ok "REPRISE_API_KEY is required" || bad "REPRISE_API_KEY is required"
  serve_stop
else bad "serve with REPRISE_API_KEY starts"; serve_stop; fi
if REPRISE_API_KEY=env-key-89ab serve_bg --api-key-file "$TMP/keys"; then
  [ "$(code env-key-89ab)" = 401 ] && [ "$(code key-bob-4567)" = 200 ] && ok "--api-key-file replaces REPRISE_API_KEY" ||
    bad "--api-key-file replaces REPRISE_API_KEY"
  serve_stop
else bad "serve with REPRISE_API_KEY and --api-key-file starts"; serve_stop; fi
# the flag works but says it is visible
if serve_bg --api-key flag-key-cdef; then
  grep -q "prefer --api-key-file" "$TMP/serve.log" && ok "--api-key warns that it is visible" || bad "--api-key warns"
  [ "$(code flag-key-cdef)" = 200 ] && ok "--api-key is required" || bad "--api-key is required"
  serve_stop
else bad "serve --api-key starts"; serve_stop; fi

# ---- --help says all of it
"$BIN" serve --help > "$TMP/help" 2>&1
for w in --api-key-file REPRISE_API_KEY "process list" "chmod 600" --cache-namespace --key-sessions --key-kv-mb; do
  grep -q -- "$w" "$TMP/help" && ok "serve --help mentions $w" || bad "serve --help mentions $w"
done

finish
