# server.sh — a live `reprise serve` for the tests/cli scripts, sourced as `. "$(dirname "$0")/lib/server.sh"` (not a
# test itself). Uses the caller's BIN (the reprise binary), M (the model) and TMP (the test's temp dir); the server
# writes its stderr to $TMP/serve.log, its pid is SP and its port `port`.
#   serve_trap            on exit: kill the server (if one is up) and remove $TMP
#   serve_start PORT ARGS...  `serve -m $M --port PORT --port-file $TMP/port ARGS...` in the background, waiting up to
#                         10 s for the port file; sets SP and port; fails (no server left behind) when it exits first
#                         or does not come up (PORT 8080 when taken, say)
#   serve_up PORT ARGS... serve_start, or "FAIL: the server did not start", the log, and exit 1
#   serve_stop            SIGTERM, then its exit status (0: it stopped cleanly)
SP=""
serve_trap() { trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT; }
serve_start() {
  local p="$1"; shift
  rm -f "$TMP/port"
  "$BIN" serve -m "$M" --port "$p" --port-file "$TMP/port" "$@" 2>"$TMP/serve.log" &
  SP=$!
  for _ in $(seq 100); do
    [ -s "$TMP/port" ] && { port=$(cat "$TMP/port"); return 0; }
    kill -0 "$SP" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$SP" 2>/dev/null; wait "$SP" 2>/dev/null; SP=""
  return 1
}
serve_up() { serve_start "$@" || { echo "FAIL: the server did not start"; cat "$TMP/serve.log"; exit 1; }; }
serve_stop() { local rc=0; kill -TERM "$SP"; wait "$SP" || rc=$?; SP=""; return "$rc"; }
