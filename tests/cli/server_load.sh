#!/bin/bash
# server_load.sh — bounded loopback load test of `reprise serve`: 32 clients x 500 requests (chat, SSE, client
# disconnects, completions, malformed bodies) on the serial backend, a shorter round on the scheduler backend
# with a short queue (429s);
# zero crashes, no 5xx but 503, every malformed request 4xx, bounded RSS, a clean SIGTERM drain.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="${RP_TEST_TMP:-/tmp}/server_load.$$"
M="$SHARED/models/stories260K.gguf"
if [ ! -f "$M" ]; then echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; fi
CC="${CC:-cc}"
command -v "$CC" >/dev/null 2>&1 || { echo "SKIP: no C compiler ($CC) for the load generator"; exit 77; }
mkdir -p "$TMP"
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT
"$CC" -O2 -pthread "$HERE/tests/load/loadgen.c" -o "$TMP/loadgen" || { echo "FAIL: building the load generator"; exit 1; }
fail=0
# ASan keeps freed memory in a quarantine (256 MB by default): a sanitized build gets a larger RSS bound
RSS_MB=256
if grep -qa "__asan_init" "$BIN" 2>/dev/null; then RSS_MB=1024; echo "(sanitized build: RSS bound $RSS_MB MB)"; fi

# round NAME CLIENTS REQUESTS SERVER-ARGS...
round() {
  local name=$1 clients=$2 requests=$3; shift 3
  rm -f "$TMP/port"
  "$BIN" serve -m "$M" --port 0 --port-file "$TMP/port" --quiet -t 1 "$@" 2>"$TMP/serve.$name.log" &
  SP=$!
  for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
  if [ ! -s "$TMP/port" ]; then echo "FAIL $name: the server did not start"; cat "$TMP/serve.$name.log"; fail=1; return; fi
  local port; port=$(cat "$TMP/port")
  echo "== $name: $clients clients x $requests requests, serve $*"
  if ! "$TMP/loadgen" --port "$port" --clients "$clients" --requests "$requests" --pid "$SP" --rss-limit-mb "$RSS_MB" --time-limit 150; then
    echo "FAIL $name: load generator checks"; fail=1
  fi
  if ! kill -0 "$SP" 2>/dev/null; then echo "FAIL $name: the server crashed"; cat "$TMP/serve.$name.log"; fail=1; SP=""; return; fi
  # still healthy after the load
  local health
  health=$(exec 3<>/dev/tcp/127.0.0.1/"$port"; printf 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; head -1 <&3)
  case "$health" in *" 200 "*) echo "ok   $name: healthy after the load";; *) echo "FAIL $name: /health answered '$health'"; fail=1;; esac
  kill -TERM "$SP"
  local rc=0
  for _ in $(seq 150); do kill -0 "$SP" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SP" 2>/dev/null; then echo "FAIL $name: SIGTERM did not stop the server in 15 s"; kill -9 "$SP"; fail=1; fi
  wait "$SP"; rc=$?
  SP=""
  if [ "$rc" -ne 0 ]; then echo "FAIL $name: server exit code $rc after SIGTERM"; tail -5 "$TMP/serve.$name.log"; fail=1
  else echo "ok   $name: SIGTERM drained and exited 0"; fi
  if grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$TMP/serve.$name.log"; then
    echo "FAIL $name: sanitizer report"; grep -E "ERROR|runtime error" "$TMP/serve.$name.log" | head -5; fail=1
  fi
}

round serial 32 500 --parallel 1   # the default is auto: the serial backend named
round batched 32 150 --parallel 4 --queue 20   # 24 places for 32 clients: some requests get 429
[ "$fail" -eq 0 ] && echo "server_load: all checks passed"
exit "$fail"
