#!/bin/bash
# cli_basic.sh — end-to-end checks of the `reprise` CLI: run/tokenize/inspect/synth output and bad-input exits.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/cli_basic.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

# usage and unknown commands
"$BIN" >/dev/null 2>&1; check "no args exits 2" '[ $? -eq 2 ]'
"$BIN" frobnicate >/dev/null 2>&1; check "unknown command exits 2" '[ $? -eq 2 ]'
"$BIN" run --bogus >/dev/null 2>&1; check "unknown option exits 2" '[ $? -eq 2 ]'
"$BIN" run -m x.gguf -p hi -n notanumber >/dev/null 2>&1; check "bad number exits 2" '[ $? -eq 2 ]'

# --help lists every command main.c dispatches and every benchmark reprise-bench (bench/main.c) dispatches
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
"$BIN" --help > "$TMP/help" 2>&1
missing=""
for c in $(grep -o 'strcmp(c, "[a-z]*")' "$HERE/cli/main.c" | sed 's/.*"\(.*\)".*/\1/'); do
  grep -q "^  $c " "$TMP/help" || missing="$missing $c"
done
for b in $(grep -o 'strcmp(argv\[1\], "[a-z]*")' "$HERE/bench/main.c" | sed 's/.*"\(.*\)".*/\1/'); do
  grep -q "^    bench $b " "$TMP/help" || missing="$missing bench-$b"
done
check "--help lists every command and bench subcommand (missing:${missing:- none})" '[ -z "$missing" ] && [ "$(grep -c "strcmp(c, " "$HERE/cli/main.c")" -ge 10 ]'

# `reprise bench` forwards to reprise-bench: the one beside the binary, else PATH's, else a clear error
BENCH_HELP="$("$BIN" bench --help 2>&1)"; rc=$?
check "bench --help: reprise-bench's benchmark list, through the forwarder" '[ $rc -eq 0 ] && grep -q "^  ablation " <<<"$BENCH_HELP"'
"$BIN" bench frobnicate >/dev/null 2>"$TMP/e"; rc=$?
check "bench frobnicate: reprise-bench's exit 2 and message come through" '[ $rc -eq 2 ] && grep -q "unknown benchmark .frobnicate." "$TMP/e"'
mkdir -p "$TMP/alone" "$TMP/onpath"
cp "$BIN" "$TMP/alone/reprise"
PATH="$TMP/onpath" "$TMP/alone/reprise" bench model --help >/dev/null 2>"$TMP/e"; rc=$?
check "bench without reprise-bench beside it or on PATH: exit 127, says what is missing" \
  '[ $rc -eq 127 ] && grep -q "reprise-bench. is not installed" "$TMP/e"'
printf '#!/bin/sh\necho "path-bench $*"\n' > "$TMP/onpath/reprise-bench"; chmod +x "$TMP/onpath/reprise-bench"
out="$(PATH="$TMP/onpath" "$TMP/alone/reprise" bench model -r 1 2>&1)"
check "bench falls back to reprise-bench on PATH, with the same arguments" '[ "$out" = "path-bench model -r 1" ]'

# unknown options: the closest known option of that command
"$BIN" run --top_k 5 >/dev/null 2>"$TMP/e"; rc=$?
check "run --top_k: did you mean --top-k?" '[ $rc -eq 2 ] && grep -q "did you mean --top-k?" "$TMP/e"'
"$BIN" run --temperature 1 >/dev/null 2>"$TMP/e"
check "run --temperature: did you mean --temp?" 'grep -q "did you mean --temp?" "$TMP/e"'
"$BIN" synth --ouput x.gguf >/dev/null 2>"$TMP/e"
check "synth --ouput: did you mean --output?" 'grep -q "did you mean --output?" "$TMP/e"'
"$BIN" bench model --repetitons 3 >/dev/null 2>"$TMP/e"
check "bench model --repetitons: did you mean --repetitions?" 'grep -q "did you mean --repetitions?" "$TMP/e"'
"$BIN" run --top-k=5 >/dev/null 2>"$TMP/e"; rc=$?
check "run --top-k=5: says to put the value after a space" '[ $rc -eq 2 ] && grep -q "write .--top-k 5." "$TMP/e"'
"$BIN" run -q >/dev/null 2>"$TMP/e"; rc=$?
check "run -q: no far-fetched suggestion" '[ $rc -eq 2 ] && ! grep -q "did you mean" "$TMP/e"'
"$BIN" run -cnv -m x.gguf -p hi >/dev/null 2>"$TMP/e"; rc=$?
check "run -cnv: points to reprise chat" '[ $rc -eq 2 ] && grep -q "reprise chat" "$TMP/e"'

# Ctrl-C (or a SIGTERM) during synth removes the temp file: a big preset, signalled once its temp file exists
for sig in INT TERM; do
  "$BIN" synth --arch llama --preset llama-3.2-1b --type q4_0 -o "$TMP/big.gguf" 2>"$TMP/e" &
  sp=$!
  for _ in $(seq 600); do ls "$TMP"/big.gguf.tmp.* >/dev/null 2>&1 && break; sleep 0.05; done
  had_tmp=$(ls "$TMP"/big.gguf.tmp.* 2>/dev/null | wc -l)
  sleep 0.3
  kill -$sig $sp; wait $sp; rc=$?
  left=$(ls "$TMP"/big.gguf* 2>/dev/null | wc -l)
  want=$([ $sig = INT ] && echo 130 || echo 143)
  check "synth stopped by SIG$sig: exit $want, temp file removed, no output" '[ "$had_tmp" -eq 1 ] && [ $rc -eq $want ] && [ "$left" -eq 0 ] && grep -q "interrupted" "$TMP/e"'
done

# progress lines: on a terminal only (a pty), never in a redirected stderr
"$BIN" synth --arch llama --preset tiny --type q8_0 --seed 4 -o "$TMP/p.gguf" 2>"$TMP/e"
check "no progress line when stderr is not a terminal" '! grep -q "%" "$TMP/e" && ! grep -q $'"'"'\r'"'"' "$TMP/e"'
if command -v python3 >/dev/null 2>&1; then
  python3 - "$BIN" "$TMP" >"$TMP/pty.log" 2>&1 <<'EOF'
import os, pty, sys
binp, tmp = sys.argv[1], sys.argv[2]
def on_pty(args):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(binp, [binp] + args)
    out = b""
    while True:
        try: d = os.read(fd, 65536)
        except OSError: break
        if not d: break
        out += d
    os.waitpid(pid, 0)
    return out
s = on_pty(["synth", "--arch", "llama", "--preset", "small", "--type", "q8_0", "-o", tmp + "/pp.gguf"])
assert b"\rsynth: 100% (" in s and b"MiB)" in s, s[-300:]
l = on_pty(["run", "-m", tmp + "/pp.gguf", "-p", "hi", "-n", "1"])
assert b"\rloading pp.gguf: 100%" in l and b"\r\x1b[K" in l, l[-300:]
# serve: the same line while its backend loads the model, then the listening line
import select, signal, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(binp, [binp, "serve", "-m", tmp + "/pp.gguf", "--port", "0", "-t", "1"])
out, end = b"", time.time() + 60
while b"listening" not in out and time.time() < end:
    if select.select([fd], [], [], 0.2)[0]:
        try: out += os.read(fd, 65536)
        except OSError: break
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
assert b"\rloading pp.gguf: 100%" in out and b"listening" in out, out[-300:]
print("pty ok")
EOF
  check "synth and model loading (run, serve) show a progress line on a terminal" 'grep -q "pty ok" "$TMP/pty.log" || { cat "$TMP/pty.log"; false; }'
else
  skip=$((skip+1)); echo "SKIP progress pty check: python3 not found"
fi

# gemma2 / gemma3: synth, inspect names the architecture, run generates
for a in gemma2 gemma3; do
  "$BIN" synth --arch $a --preset tiny --type q8_0 -o "$TMP/$a.gguf" 2>/dev/null
  check "synth --arch $a + inspect names the architecture" '"$BIN" inspect "$TMP/$a.gguf" 2>/dev/null | grep -q "^model: arch $a, .*rope neox"'
  "$BIN" run -m "$TMP/$a.gguf" -p "hello" -n 8 --temp 0 >/dev/null 2>"$TMP/err"
  check "run on a $a model generates" 'grep -q "^generated: 8 tokens" "$TMP/err"'
  # sliding-window KV: inspect and run say what the local layers hold; --swa-full generates the same greedy text
  check "inspect on $a shows the sliding window and both KV sizes" \
    '"$BIN" inspect --no-tensors "$TMP/$a.gguf" 2>/dev/null | grep -q "^sliding window: 32 tokens on [0-9]* of [0-9]* layers; f16 KV per sequence at .* MiB with --swa-full"'
  "$BIN" run -m "$TMP/$a.gguf" -p "hello there, a prompt of a few more tokens" -n 150 --ignore-eos --temp 0 -c 256 -b 16 >"$TMP/ring.txt" 2>"$TMP/err"
  check "run on $a: the KV note counts window + batch cells for the local layers" \
    'grep -q "sliding-window layers hold 48 cells (window 32 + batch 16), [0-9.]* MiB with --swa-full" "$TMP/err"'
  "$BIN" run -m "$TMP/$a.gguf" -p "hello there, a prompt of a few more tokens" -n 150 --ignore-eos --temp 0 -c 256 -b 16 --swa-full >"$TMP/full.txt" 2>"$TMP/err"
  check "run on $a: --swa-full says so" 'grep -q "swa-full: its [0-9]* sliding-window layers keep every cell" "$TMP/err"'
  check "run on $a: ring and --swa-full generate the same greedy text past several windows" 'cmp -s "$TMP/ring.txt" "$TMP/full.txt" && test -s "$TMP/ring.txt"'
done
"$BIN" synth --arch gemma2 --preset qwen3-0.6b --type q8_0 -o "$TMP/x.gguf" >/dev/null 2>"$TMP/e"
check "synth: a preset of another architecture is an error naming it" 'grep -q "is a qwen3 model, not --arch gemma2" "$TMP/e"'

# synth + run on the embedded default, deterministic
"$BIN" synth --arch llama --preset tiny --type q8_0 --seed 3 -o "$TMP/a.gguf" 2>/dev/null
"$BIN" synth --arch llama --preset tiny --type q8_0 --seed 3 -o "$TMP/b.gguf" 2>/dev/null
check "synth is deterministic" 'cmp -s "$TMP/a.gguf" "$TMP/b.gguf"'
o1=$("$BIN" run -m "$TMP/a.gguf" -p "hello" -n 8 --temp 0 2>"$TMP/err")
check "run prints timings on stderr" 'grep -q "^prompt: [0-9]* tokens" "$TMP/err" && grep -q "^generated: 8 tokens" "$TMP/err" && grep -q "^load: " "$TMP/err"'
o2=$("$BIN" run -m "$TMP/a.gguf" -p "hello" -n 8 --temp 0 -t 1 2>/dev/null)
check "greedy output independent of thread count" '[ "$o1" = "$o2" ]'
o3=$("$BIN" run -m "$TMP/a.gguf" -p "hello" -n 8 --temp 1.0 --seed 5 2>/dev/null)
o4=$("$BIN" run -m "$TMP/a.gguf" -p "hello" -n 8 --temp 1.0 --seed 5 2>/dev/null)
check "seeded sampling reproducible" '[ "$o3" = "$o4" ]'

M="$SHARED/models/stories260K.gguf"
if [ -f "$M" ]; then
  want="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it,"
  got=$("$BIN" run -m "$M" -p "Once upon a time" -n 48 --temp 0 2>/dev/null)
  check "stories260K greedy text equals golden" '[ "Once upon a time$got" = "$want" ]'
  printf 'Once upon a time' > "$TMP/p.txt"
  got2=$("$BIN" run -m "$M" -f "$TMP/p.txt" -n 48 --temp 0 2>/dev/null)
  check "prompt from file (-f)" '[ "$got" = "$got2" ]'
  got3=$("$BIN" run -m "$M" -p "Once upon a time" -n 48 --temp 0 --kv-type q8_0 2>/dev/null)
  check "q8_0 KV cache runs" '[ -n "$got3" ]'
  # -c beyond the training context (512) is lowered to it with a note; generation stops at the context's end
  "$BIN" run -m "$M" -p "Once upon a time" -c 100000 -n 1000 --ignore-eos --temp 0 >/dev/null 2>"$TMP/e"; rc=$?
  ngen=$(sed -n 's/^generated: \([0-9]*\) tokens.*/\1/p' "$TMP/e")
  check "run -c 100000 clamped to the training context (note; <= 512 tokens)" '[ $rc -eq 0 ] && grep -q "training context; using 512" "$TMP/e" && [ -n "$ngen" ] && [ "$ngen" -le 512 ] && [ "$ngen" -gt 400 ]'
  "$BIN" run -m "$M" -p "Once upon a time" -n -1 --ignore-eos --temp 0 >/dev/null 2>"$TMP/e"; rc=$?
  ngen=$(sed -n 's/^generated: \([0-9]*\) tokens.*/\1/p' "$TMP/e")
  check "run -n -1: until the context is full" '[ $rc -eq 0 ] && grep -q "context full" "$TMP/e" && [ -n "$ngen" ] && [ "$ngen" -gt 400 ]'
  # llama-cli spellings
  a=$("$BIN" run -m "$M" -p "Once upon a time" -n 16 --temp 0 --kv-type q8_0 2>/dev/null)
  b=$("$BIN" run -m "$M" -p "Once upon a time" -n 16 --temp 0 -ctk q8_0 -ctv q8_0 -fa --jinja 2>/dev/null)
  c=$("$BIN" run -m "$M" -p "Once upon a time" -n 16 --temp 0 --cache-type-k q8_0 --cache-type-v q8_0 --flash-attn on 2>/dev/null)
  check "run: -ctk/-ctv = --kv-type; -fa [on] and --jinja accepted" '[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]'
  "$BIN" run -m "$M" -p hi -ctk q8_0 >/dev/null 2>"$TMP/e"; rc=$?
  check "run: -ctk without a matching -ctv is an error" '[ $rc -eq 2 ] && grep -q "same type" "$TMP/e"'
  "$BIN" run -m "$M" -p hi -n 2 -fa off >/dev/null 2>"$TMP/e"; rc=$?
  check "run -fa off: accepted with a note" '[ $rc -eq 0 ] && grep -q "always flash-style" "$TMP/e"'
  # the demo shows no speedup for a request that reused nothing (request 1 fills the cache)
  "$BIN" demo -m "$M" --words 20 -t 1 > "$TMP/demo" 2>&1; rc=$?
  r1=$(grep '^|       1 |' "$TMP/demo"); r2=$(grep '^|       2 |' "$TMP/demo")
  check "demo: request 1 (nothing reused) shows n/a, request 2 a speedup" '[ $rc -eq 0 ] && [ "$(echo "$r1" | grep -o "n/a" | wc -l)" -eq 2 ] && echo "$r2" | grep -q "[0-9]x |"'
  "$BIN" inspect "$M" > "$TMP/insp" 2>&1
  check "inspect lists metadata and tensors" 'grep -q "llama.block_count" "$TMP/insp" && grep -q "blk.4.ffn_up.weight" "$TMP/insp" && grep -q "arch llama" "$TMP/insp"'
  # corrupt files: truncated at many offsets, flipped magic — clean errors, never a crash
  size=$(stat -c %s "$M")
  crashes=0; nonfail=0
  for off in 0 1 3 4 7 8 15 16 23 24 40 100 1000 5000 14335 14336 20000 131072 262400 $((size-1)); do
    head -c "$off" "$M" > "$TMP/t.gguf"
    "$BIN" run -m "$TMP/t.gguf" -p hi -n 1 >/dev/null 2>"$TMP/e"; rc=$?
    [ $rc -ge 128 ] && crashes=$((crashes+1))
    [ $rc -eq 0 ] && nonfail=$((nonfail+1))
    [ -s "$TMP/e" ] || nonfail=$((nonfail+1))
  done
  check "truncated files: no crash, all rejected with a message" '[ $crashes -eq 0 ] && [ $nonfail -eq 0 ]'
  { printf 'GGUX'; tail -c +5 "$M"; } > "$TMP/m.gguf"
  "$BIN" inspect "$TMP/m.gguf" >/dev/null 2>"$TMP/e"; rc=$?
  check "wrong magic rejected" '[ $rc -eq 1 ] && grep -qi "magic" "$TMP/e"'
  # bench kernels: the bandwidth probe reads four ways (vector loads: 0 below AVX2), the ceiling uses the best
  "$BIN" bench kernels --types q8_0 -t 1 --rows 64 --cols 256 --n-big 8 -r 1 --mem-mb 32 --json -m "$M" > "$TMP/bk.json" 2>&1
  check "bench kernels: bandwidth per pattern, ceiling from the best" 'python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
b = d[\"bandwidth\"][0]
p = [b[\"one_stream_gb_s\"], b[\"four_streams_gb_s\"], b[\"l2_prefetch_gb_s\"]]
v = b[\"vector_gb_s\"]
assert min(p) > 0 and v >= 0 and abs(b[\"gb_s\"] - max(p + [v])) < 1e-9, b
m = d[\"model\"]
assert abs(m[\"decode_ceiling_tok_s\"] - m[\"bandwidth_gb_s\"] * 1e9 / m[\"bytes_per_token\"]) < 0.01 * m[\"decode_ceiling_tok_s\"], m
" "$TMP/bk.json"'
  # bench model --ceiling: a probe before every tg run, paired ratios
  "$BIN" bench model -m "$M" -p 0 -n 8 -t 1 -r 3 --ceiling --json > "$TMP/bmc.json" 2>&1
  check "bench model --ceiling: ceiling and paired fraction reported" 'python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))[0]
assert r[\"test\"] == \"tg8\" and r[\"bytes_per_token\"] > 0 and r[\"ceiling_tok_s_median\"] > 0, r
assert 0 < r[\"of_ceiling_min\"] <= r[\"of_ceiling_median\"] <= r[\"of_ceiling_max\"], r
" "$TMP/bmc.json"'
  # bench model --temp: one tg row per temperature (sampled decode), each with its paired ratio to the first
  "$BIN" bench model -m "$M" -p 0 -n 8 -t 1 -r 3 --temp 0,1 --top-p 0.9 --json > "$TMP/bmt.json" 2>&1
  check "bench model --temp 0,1: a sampled tg row per temperature" 'python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert [x[\"test\"] for x in r] == [\"tg8 t=0\", \"tg8 t=1\"], r
assert [x[\"temp\"] for x in r] == [0, 1] and all(x[\"top_k\"] == 0 and abs(x[\"top_p\"] - 0.9) < 1e-6 for x in r), r
assert r[0][\"vs_first_median\"] == 1 and r[1][\"vs_first_median\"] > 0 and r[1][\"tok_s_median\"] > 0, r
" "$TMP/bmt.json"'
  # bench kernels --pages-ab: the same packed weight on 2 MiB and 4 KiB pages, alternating
  "$BIN" bench kernels --pages-ab --types q4_0,q8_0 -t 1 --rows 64 --cols 256 -r 2 --json > "$TMP/pab.json" 2>&1
  check "bench kernels --pages-ab: both page sizes measured, ratio consistent" 'python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
rows = d[\"pages_ab\"]
assert [r[\"kernel\"].split(\"/\")[0] for r in rows] == [\"q4_0\", \"q8_0\"], rows
for r in rows:
    assert r[\"huge_gb_s\"] > 0 and r[\"small_gb_s\"] > 0, r
    assert abs(r[\"ratio\"] - r[\"huge_gb_s\"] / r[\"small_gb_s\"]) < 1e-2 * r[\"ratio\"], r
" "$TMP/pab.json"'
else
  skip=$((skip+1)); echo "SKIP stories260K checks: $M not found"
fi

# bench attn: the attention kernel alone (no model needed); every KV type and shape asked for, the reference too
"$BIN" bench attn -d 128,300 --rows 1,64 --kv f16,q8_0 -r 1 --ref --json > "$TMP/ba.json" 2>&1
check "bench attn: decode and prefill points per kernel, GB/s consistent" 'python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
p = d[\"points\"]
assert len(p) >= 8 and all(x[\"us\"] > 0 and x[\"gflops\"] > 0 for x in p), p
assert {x[\"kv_type\"] for x in p} == {\"f16\", \"q8_0\"} and {x[\"rows\"] for x in p} == {1, 64}, p
assert any(x[\"kernel\"].endswith(\"/ref\") for x in p), p
for x in p:
    rb = 128 if x[\"kv_type\"] == \"f16\" else 68
    assert abs(x[\"kv_gb_s\"] - 2 * rb * x[\"depth\"] / x[\"us\"] * 1e-3) < 1e-2 * x[\"kv_gb_s\"] + 1e-3, x
" "$TMP/ba.json"'
"$BIN" bench attn -d 10 --rows 64 >/dev/null 2>"$TMP/e"; rc=$?
check "bench attn: depth below --rows is a clear error" '[ $rc -eq 2 ] && grep -q "depth 10 is less than --rows 64" "$TMP/e"'

V="$SHARED/models/vocab/llama3-bpe.vocab.gguf"
if [ -f "$V" ]; then
  got=$("$BIN" tokenize -m "$V" --text "Were Scott Derrickson and Ed Wood of the same nationality?" --json --no-bos 2>/dev/null)
  check "tokenize --json on a vocab-only GGUF" '[ "$got" = "[89553, 10016, 73189, 942, 323, 3279, 12404, 315, 279, 1890, 59343, 30]" ]'
  got=$("$BIN" tokenize -m "$V" --text "hi" --json 2>/dev/null)
  check "tokenize adds BOS per the vocab" '[ "$got" = "[128000, 6151]" ]'
  got=$("$BIN" tokenize -m "$V" --text "<|eot_id|>" --json --no-bos 2>/dev/null)
  check "special tokens parsed" '[ "$got" = "[128009]" ]'
  got=$("$BIN" tokenize -m "$V" --text "<|eot_id|>" --json --no-bos --no-special 2>/dev/null)
  check "--no-special tokenizes the text" '[ "$got" != "[128009]" ]'
  "$BIN" run -m "$V" -p hi >/dev/null 2>"$TMP/e"; rc=$?
  check "run on a vocab-only file is a clear error" '[ $rc -eq 1 ] && grep -q "no tensors" "$TMP/e"'
else
  skip=$((skip+1)); echo "SKIP tokenizer checks: $V not found"
fi
G="$SHARED/models/vocab/ggml-vocab-gpt-2.gguf"
if [ -f "$G" ]; then
  "$BIN" run -m "$G" -p hi >/dev/null 2>"$TMP/e"; rc=$?
  check "unknown architecture is a clear error" '[ $rc -eq 1 ] && grep -q "unknown architecture .gpt2." "$TMP/e"'
fi

M="$SHARED/models/stories260K.gguf"
if [ -f "$M" ]; then
  # bench model -d (depth) and --busy (a competing process): rows, paired ratios and JSON fields
  out=$("$BIN" bench model -m "$M" -p 8 -n 4 -d 0,32 -r 2 -t 2 --busy 1 2>/dev/null); rc=$?
  check "bench model -d 0,32 --busy 1: quiet and busy rows at each depth" '[ $rc -eq 0 ] && echo "$out" | grep -q "| *pp8 |" && echo "$out" | grep -q "tg4 @ d32 busy=1" && echo "$out" | grep -q "busy=1 / quiet: "'
  js=$("$BIN" bench model -m "$M" -p 0 -n 4 -d 16 -r 2 --busy 2 --ceiling --json 2>/dev/null)
  check "bench model --json: depth, busy, vs_quiet and the KV-counting ceiling" 'echo "$js" | python3 -c "import json,sys; r=json.load(sys.stdin); assert len(r)==2 and r[0][\"depth\"]==16 and \"busy\" not in r[0] and r[1][\"busy\"]==2 and r[1][\"vs_quiet_median\"]>0 and r[0][\"bytes_per_token\"]>0"'
  "$BIN" bench model -m "$M" -d -5 >/dev/null 2>"$TMP/e"; rc=$?
  check "bench model -d -5 is an error naming -d" '[ $rc -eq 2 ] && grep -q "\-d expects" "$TMP/e"'
  # no busy process survives the benchmark
  check "bench model --busy leaves no spinning process behind" '! pgrep -f "reprise-bench model -m $M -p 0 -n 4 -d 16" >/dev/null'
fi

finish
