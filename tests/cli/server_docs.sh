#!/bin/bash
# server_docs.sh — runs every ```sh example of docs/server.md that talks to localhost:8080 against a live
# `reprise serve` on stories260K, verbatim (port 8080 when free, else a free port swapped in).
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
DOC="$HERE/docs/server.md"
TMP="${RP_TEST_TMP:-/tmp}/server_docs.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP: $M not found (set RP_SHARED_DIR)"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed (extracts the examples)"; exit 77; }
mkdir -p "$TMP"
. "$(dirname "$0")/lib/server.sh"
serve_trap
unset REPRISE_API_KEY

serve_start 8080 --quiet -t 1 --embeddings || serve_up 0 --quiet -t 1 --embeddings
echo "server on port $port"

# every ```sh block mentioning localhost:8080, one file each
python3 - "$DOC" "$TMP" "$port" <<'PY'
import re, sys
doc, tmp, port = sys.argv[1], sys.argv[2], sys.argv[3]
blocks = re.findall(r"```sh\n(.*?)```", open(doc).read(), re.S)
n = 0
for b in blocks:
    if "localhost:8080" not in b:
        continue
    if port != "8080":
        b = b.replace("localhost:8080", "localhost:" + port)
    n += 1
    open(f"{tmp}/ex{n:02d}.sh", "w").write(b)
print(n, file=open(f"{tmp}/count", "w"))
PY
n=$(cat "$TMP/count")
[ "$n" -ge 8 ] || { echo "FAIL: only $n examples found in $DOC"; exit 1; }
fail=0
for ex in "$TMP"/ex*.sh; do
  name=$(basename "$ex" .sh)
  out=$(bash -o pipefail "$ex" 2>&1); rc=$?
  if [ "$rc" -ne 0 ] || [ -z "$out" ] || printf '%s' "$out" | grep -q '"error"'; then
    echo "FAIL $name (exit $rc):"; sed 's/^/    /' "$ex"; echo "  output: ${out:0:400}"; fail=1
  else
    echo "ok   $name: ${out:0:100}"
  fi
done
serve_stop || fail=1
[ "$fail" -eq 0 ] && echo "server_docs: all $n examples work"
exit "$fail"
