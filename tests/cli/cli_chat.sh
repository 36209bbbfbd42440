#!/bin/bash
# cli_chat.sh — `reprise chat` through a pipe and a pty: empty lines ignored, /exit, one turn for a line over 8 KiB,
# Ctrl-C stops a reply and returns to the prompt (and ends the chat at the prompt), run's sampling options accepted.
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
TMP="${RP_TEST_TMP:-/tmp}/cli_chat.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"
prompts() { grep -o '> ' "$1" | wc -l; }   # how many times chat asked for a line

M="$SHARED/models/stories260K.gguf"
if [ -f "$M" ]; then
  # an empty (or blank) line asks again instead of ending the chat: 4 lines + EOF = 5 prompts, 2 replies
  printf 'Once upon a time\n\n   \nThe dog\n' | "$BIN" chat -m "$M" -n 8 --temp 0 >"$TMP/o" 2>"$TMP/e"; rc=$?
  check "chat: empty lines ignored, EOF ends (rc 0)" '[ $rc -eq 0 ] && [ "$(prompts "$TMP/e")" -eq 5 ] && [ "$(wc -l <"$TMP/o")" -ge 2 ]'
  "$BIN" chat -m "$M" --think maybe >/dev/null 2>"$TMP/e"; rc=$?
  check "chat: --think takes on or off (exit 2 otherwise)" '[ $rc -eq 2 ] && grep -q "on or off" "$TMP/e"'
  printf 'Once upon a time\n' | "$BIN" chat -m "$M" -n 4 --temp 0 --think on >/dev/null 2>&1; rc=$?
  check "chat: --think on accepted" '[ $rc -eq 0 ]'
  printf 'Once upon a time\n/exit\nThe dog\n' | "$BIN" chat -m "$M" -n 8 --temp 0 >"$TMP/o" 2>"$TMP/e"; rc=$?
  check "chat: /exit ends the chat" '[ $rc -eq 0 ] && [ "$(prompts "$TMP/e")" -eq 2 ]'
  # run's sampling options, shared parsing: seeded sampling is reproducible, penalties and llama-cli spellings accepted
  opts="-n 12 --temp 1 --top-k 0 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1 --repeat-last-n 32 --presence-penalty 0.5 --frequency-penalty 0.5 --seed 9 --kv-type q8_0 -fa --jinja -cnv"
  a=$(printf 'Once upon a time\n' | "$BIN" chat -m "$M" $opts 2>"$TMP/e1"); rc1=$?
  b=$(printf 'Once upon a time\n' | "$BIN" chat -m "$M" $opts 2>/dev/null)
  c=$(printf 'Once upon a time\n' | "$BIN" chat -m "$M" ${opts/--seed 9/--seed 10} 2>/dev/null)
  check "chat: run's sampling options (seeded, reproducible, seed matters)" '[ $rc1 -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ]'
  a=$(printf 'Once upon a time\n' | "$BIN" chat -m "$M" -n 12 --temp 0 -ctk q8_0 -ctv q8_0 2>/dev/null)
  b=$(printf 'Once upon a time\n' | "$BIN" chat -m "$M" -n 12 --temp 0 --kv-type q8_0 2>/dev/null)
  check "chat: -ctk/-ctv = --kv-type" '[ -n "$a" ] && [ "$a" = "$b" ]'
  "$BIN" chat -m "$M" -ctk q8_0 </dev/null >/dev/null 2>"$TMP/e"; rc=$?
  check "chat: -ctk and -ctv that disagree are an error" '[ $rc -eq 2 ] && grep -q "same type" "$TMP/e"'
  s1=$(printf 'Hi\n' | "$BIN" chat -m "$M" -n 8 --temp 0 -sys "You are a cat." 2>/dev/null)
  s2=$(printf 'Hi\n' | "$BIN" chat -m "$M" -n 8 --temp 0 --system-prompt "You are a cat." 2>/dev/null)
  s3=$(printf 'Hi\n' | "$BIN" chat -m "$M" -n 8 --temp 0 --system "You are a cat." 2>/dev/null)
  check "chat: -sys / --system-prompt / --system are one option" '[ -n "$s1" ] && [ "$s1" = "$s2" ] && [ "$s1" = "$s3" ]'
  a=$(printf 'Once upon a time\n' | "$BIN" chat -m "$M" -n -1 --temp 0 2>/dev/null); rc=$?
  check "chat: -n -1 (until end-of-generation or a full context)" '[ $rc -eq 0 ] && [ -n "$a" ]'
  "$BIN" chat -m "$M" --temperature 1 </dev/null >/dev/null 2>"$TMP/e"; rc=$?
  check "chat: unknown option suggests the closest (--temp)" '[ $rc -eq 2 ] && grep -q "did you mean --temp?" "$TMP/e"'
else
  skip=$((skip+1)); echo "SKIP stories260K chat checks: $M not found"
fi

# a line over 8 KiB is one turn: a tiny model with the Llama 3 vocabulary (9000 '=' are ~150 tokens, it fits)
V="$SHARED/models/vocab/llama3-bpe.vocab.gguf"
if [ -f "$V" ]; then
  "$BIN" synth --arch llama --preset tiny --type q8_0 --vocab "$V" -o "$TMP/t3.gguf" 2>/dev/null
  python3 -c "print('=' * 9000)" | "$BIN" chat -m "$TMP/t3.gguf" -n 4 --temp 0 >"$TMP/o" 2>"$TMP/e"; rc=$?
  check "chat: a 9000-byte line is one turn (2 prompts: the line, then EOF)" '[ $rc -eq 0 ] && [ "$(prompts "$TMP/e")" -eq 2 ] && ! grep -q "does not fit" "$TMP/e"'
  # a conversation that fills its context goes on: the oldest turns go, the kept turns' KV is shifted (not
  # recomputed), and every line still gets a reply
  printf 'Once upon a time there was a cat\nThe dog ran to the park and\nShe saw a big tree with\nThen the bird sang a song\nThe end of the story was\n' |
    "$BIN" chat -m "$M" -c 160 -n 16 --temp 0 -t 1 >"$TMP/o" 2>"$TMP/e"; rc=$?
  check "chat: a full context drops the oldest turns and shifts the rest (5 replies)" '[ $rc -eq 0 ] && [ "$(prompts "$TMP/e")" -eq 6 ] && grep -q "context full: dropped the 2 oldest messages (.* tokens); the rest of the conversation.s KV moved down" "$TMP/e" && ! grep -q "message dropped" "$TMP/e" && [ "$(grep -c . "$TMP/o")" -ge 5 ]'
  check "chat: the banner names the context and its KV memory" 'grep -q "context 160 tokens (KV cache up to .* MiB, f16)" "$TMP/e"'
else
  skip=$((skip+1)); echo "SKIP long-line check: $V not found"
fi

# Ctrl-C on a terminal (a pty, so ^C is a SIGINT from the line discipline): it stops a long reply and the prompt
# comes back; a Ctrl-C at the prompt then ends the chat (exit 130). The small synth model: a reply fills 4096 tokens.
"$BIN" synth --arch llama --preset small --type q8_0 -o "$TMP/small.gguf" 2>/dev/null
if command -v python3 >/dev/null 2>&1; then
  python3 - "$BIN" "$TMP/small.gguf" >"$TMP/pty.log" 2>&1 <<'EOF'
import os, pty, select, sys, time
binp, model = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execv(binp, [binp, "chat", "-m", model, "-n", "100000", "--ignore-eos", "--temp", "1", "-t", "1"])
buf = b""
def read_until(pred, timeout):
    global buf
    end = time.time() + timeout
    while time.time() < end:
        if pred(buf): return True
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try: d = os.read(fd, 65536)
            except OSError: return pred(buf)
            if not d: return pred(buf)
            buf += d
    return pred(buf)
def fail(msg):
    print("FAIL:", msg, repr(buf[-400:])); os.kill(pid, 9); sys.exit(1)
if not read_until(lambda b: b.endswith(b"> "), 60): fail("no first prompt")
os.write(fd, b"Tell me a story\r")
start = len(buf)
if not read_until(lambda b: len(b) > start + 200, 60): fail("no reply")
os.write(fd, b"\x03")   # Ctrl-C during the reply
if not read_until(lambda b: b"[reply stopped]" in b[start:] and b.endswith(b"> "), 30): fail("the reply did not stop / no prompt after it")
os.write(fd, b"\x03")   # Ctrl-C at the prompt
end, status = time.time() + 20, None
while status is None and time.time() < end:
    read_until(lambda b: False, 0.1)   # keep the pty drained
    p, st = os.waitpid(pid, os.WNOHANG)
    if p == pid: status = st
if status is None: fail("still running 20 s after Ctrl-C at the prompt")
code = os.waitstatus_to_exitcode(status)
if code != 130: fail("exit %d after Ctrl-C at the prompt (want 130)" % code)
print("pty ok")
EOF
  rc=$?
  check "chat: Ctrl-C stops the reply and returns to the prompt; Ctrl-C at the prompt exits 130" '[ $rc -eq 0 ] && grep -q "pty ok" "$TMP/pty.log" || { cat "$TMP/pty.log"; false; }'
else
  skip=$((skip+1)); echo "SKIP pty check: python3 not found"
fi

finish
