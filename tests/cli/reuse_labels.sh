#!/bin/bash
# reuse_labels.sh — exact and approximate reuse are told apart everywhere: `run`'s stats line, `plan`'s chunk labels,
# the server's usage extension and /metrics (both backends); approximate KV is never passed off as exact, so prefix
# mode (which promises exact KV) still answers exactly like no reuse after blend wrote approximate chunks.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/reuse_labels.$$"
M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || { echo "SKIP reuse label checks: $M not found (set RP_SHARED_DIR)"; echo "0 passed, 0 failed, 1 skipped"; exit 77; }
for t in python3 curl; do
  command -v $t >/dev/null 2>&1 || { echo "SKIP reuse label checks: $t not found"; echo "0 passed, 0 failed, 1 skipped"; exit 77; }
done
mkdir -p "$TMP"
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; rm -rf "$TMP"' EXIT
unset REPRISE_API_KEY
. "$(dirname "$0")/lib/common.sh"

# three documents; prompt 2 has them reordered (blend reuses them approximately), prompt 3 extends prompt 2
python3 - "$TMP" <<'EOF'
import json, sys
d = sys.argv[1]
sysm = "You are a story teller. Read the stories and answer the question at the end."
docs = ["Story %d: Once upon a time there was a little girl named Lily%d. She loved to play outside in the park "
        "with her big red ball, and every day she ran to the pond. " % (i, i) for i in range(3)]
json.dump([sysm] + docs + [" Who is Lily?"], open(d + "/P1.json", "w"))
json.dump([sysm, docs[2], docs[0], docs[1], " Who is Lily?"], open(d + "/P2.json", "w"))
for k, order, q in ((1, [0, 1, 2], "Who is Lily?"), (2, [2, 0, 1], "Who is Lily?"), (3, [2, 0, 1], "Who went to the pond?")):
    json.dump({"messages": [{"role": "system", "content": sysm}, {"role": "user", "content": q}],
               "reprise_documents": [docs[i] for i in order], "max_tokens": 24, "temperature": 0},
              open(d + "/req%d.json" % k, "w"))
EOF

# ---- run and plan ---------------------------------------------------------------------------------------------
RUN=("$BIN" run -m "$M" -n 16 --temp 0 -t 1)
D="$TMP/c"
"${RUN[@]}" --segments "$TMP/P1.json" --cache-dir "$D" >/dev/null 2>"$TMP/r1.err"
"${RUN[@]}" --segments "$TMP/P2.json" --cache-dir "$D" >/dev/null 2>"$TMP/r2.err"
"${RUN[@]}" --segments "$TMP/P2.json" --cache-dir "$D" >/dev/null 2>"$TMP/r3.err"
p2=$(stats_of "$TMP/r2.err" reused_prefix); x2=$(stats_of "$TMP/r2.err" reused_prefix_exact); n2=$(stats_of "$TMP/r2.err" reused_nonprefix)
p3=$(stats_of "$TMP/r3.err" reused_prefix); x3=$(stats_of "$TMP/r3.err" reused_prefix_exact); a3=$(stats_of "$TMP/r3.err" reused_prefix_approx)
echo "     run 2 (reordered): prefix $p2 (exact $x2), non-prefix $n2; run 3 (the same again): prefix $p3 (exact $x3, approx $a3)"
check "run 2 reuses the system prompt exactly and the documents non-prefix" '[ "$p2" = "$x2" ] && [ "$x2" -gt 0 ] && [ "$n2" -gt 0 ]'
check "run 3 follows the prefix path blend wrote: the approximate part is labelled approximate" \
  '[ "$a3" -gt 0 ] && [ "$x3" = "$x2" ] && [ $((x3 + a3)) = "$p3" ]'
"$BIN" plan -m "$M" --segments "$TMP/P2.json" --cache-dir "$D" >"$TMP/plan.out" 2>/dev/null
check "plan labels the system chunk exact and the documents approximate" \
  'grep -q "prefix (exact)" "$TMP/plan.out" && [ "$(grep -c "prefix (approx.)" "$TMP/plan.out")" -ge 3 ]'
check "plan's summary splits exact and approximate prefix tokens" "grep -q \"^reuse: $p3 prefix tokens ($x3 exact, $a3 approximate\" \"\$TMP/plan.out\""
"${RUN[@]}" --segments "$TMP/P2.json" --reuse none >"$TMP/plain.txt" 2>/dev/null
"${RUN[@]}" --segments "$TMP/P2.json" --cache-dir "$D" --reuse prefix >"$TMP/pfx.txt" 2>"$TMP/pfx.err"
check "prefix mode takes only the exact part (reused $(stats_of "$TMP/pfx.err" reused_prefix)) and answers as no reuse does" \
  '[ "$(stats_of "$TMP/pfx.err" reused_prefix)" = "$x2" ] && [ "$(stats_of "$TMP/pfx.err" reused_prefix_approx)" = 0 ] && cmp -s "$TMP/plain.txt" "$TMP/pfx.txt"'

# ---- serve ------------------------------------------------------------------------------------------------------
start_server() {
  rm -f "$TMP/port"
  "$BIN" serve -m "$M" --port 0 --port-file "$TMP/port" --quiet -t 1 "$@" 2>>"$TMP/serve.log" &
  SP=$!
  for _ in $(seq 200); do [ -s "$TMP/port" ] && break; kill -0 "$SP" 2>/dev/null || break; sleep 0.05; done
  PORT=$(cat "$TMP/port" 2>/dev/null)
}
stop_server() { [ -n "$SP" ] && { kill -TERM "$SP"; wait "$SP" 2>/dev/null; SP=""; }; }
# ask K MODE OUT: request K in reuse MODE; OUT gets the answer, OUT.usage its usage.reprise object
ask() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["reprise_cache"]={"mode": sys.argv[2]}; print(json.dumps(r))' \
    "$TMP/req$1.json" "$2" > "$TMP/q.json"
  curl -s -m 120 "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d @"$TMP/q.json" > "$TMP/resp.json"
  python3 - "$TMP/resp.json" "$3" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
open(sys.argv[2], "w").write(r["choices"][0]["message"]["content"])
json.dump(r["usage"]["reprise"], open(sys.argv[2] + ".usage", "w"))
EOF
}
u() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1.usage" "$2" 2>/dev/null; }

start_server
ask 3 none "$TMP/plain3"
stop_server
for par in 1 2; do
  start_server --parallel "$par"
  ask 1 blend "$TMP/s1"
  ask 2 blend "$TMP/s2"   # the documents reordered: approximate chunks are written
  ask 3 blend "$TMP/s3"   # follows prompt 2's prefix path
  ask 3 prefix "$TMP/s4"  # prefix mode: exact KV only
  curl -s -m 10 "http://127.0.0.1:$PORT/metrics" > "$TMP/metrics"
  stop_server
  start_server --parallel "$par"
  ask 1 blend "$TMP/s1"   # the documents in order, exact; the session's turn then reorders them
  # a session whose first turn blended (approximate KV resident), continued in prefix mode: only its exact head
  # is kept, and the second turn answers as an uncached request of the whole conversation does
  python3 - "$TMP" "$PORT" > "$TMP/sess.out" 2>&1 <<'EOF'
import json, sys, urllib.request
d, port = sys.argv[1], sys.argv[2]
def post(body):
    rq = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % port, json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(rq, timeout=120))
t1 = json.load(open(d + "/req2.json"))
t1["reprise_session"] = True
r1 = post(t1)
sid = r1["reprise_session"]
msgs = t1["messages"] + [r1["choices"][0]["message"], {"role": "user", "content": "And who went to the pond?"}]
t2 = dict(json.load(open(d + "/req2.json")), messages=msgs, reprise_session=sid, reprise_cache={"mode": "prefix"})
r2 = post(t2)
t3 = dict(json.load(open(d + "/req2.json")), messages=msgs, reprise_cache={"mode": "none"})
r3 = post(t3)
u1, u2 = r1["usage"]["reprise"], r2["usage"]["reprise"]
print("turn 1: nonprefix %d; turn 2 (prefix mode): prefix %d, exact %d, approx %d" %
      (u1["reused_nonprefix"], u2["reused_prefix"], u2["reused_prefix_exact"], u2["reused_prefix_approx"]))
same = r2["choices"][0]["message"]["content"] == r3["choices"][0]["message"]["content"]
approx1 = u1["reused_nonprefix"] + u1["reused_prefix_approx"]
print("SESSION_OK" if approx1 > 0 and u2["reused_prefix_approx"] == 0 and same else "SESSION_BAD")
EOF
  echo "     serve --parallel $par session: $(head -n 1 "$TMP/sess.out")"
  check "serve --parallel $par: a session with blended KV continued in prefix mode keeps only exact KV" 'grep -q SESSION_OK "$TMP/sess.out"'
  stop_server
  p=$(u "$TMP/s3" reused_prefix); x=$(u "$TMP/s3" reused_prefix_exact); a=$(u "$TMP/s3" reused_prefix_approx)
  echo "     serve --parallel $par request 3: prefix $p (exact $x, approx $a); prefix mode after: $(u "$TMP/s4" reused_prefix)"
  check "serve --parallel $par: usage splits the prefix into exact and approximate" \
    '[ -n "$a" ] && [ "$a" -gt 0 ] && [ $((x + a)) = "$p" ]'
  check "serve --parallel $par: prefix mode reuses exact KV only and answers as no reuse does" \
    '[ "$(u "$TMP/s4" reused_prefix_approx)" = 0 ] && cmp -s "$TMP/s4" "$TMP/plain3"'
  check "serve --parallel $par: /metrics counts approximate prefix tokens apart" \
    'grep -q "^reprise_reused_tokens_total{kind=\"prefix_approx\"} [1-9]" "$TMP/metrics" && grep -q "^reprise_reused_tokens_total{kind=\"prefix\"} [1-9]" "$TMP/metrics"'
done

finish
