#!/bin/bash
# chat_template.sh — --chat-template on chat / run / serve: a built-in's name or a Jinja file is used; an unknown
# name, an unreadable file or a template that fails is a clear error at start-up (never a silent fallback).
set -u
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
SHARED="${RP_SHARED_DIR:-../shared}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="${RP_TEST_TMP:-/tmp}/chat_template.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

M="$SHARED/models/stories260K.gguf"
[ -f "$M" ] || skip_all "$M not found (set RP_SHARED_DIR)"
GOOD="$HERE/tests/data/templates/gemma-style.jinja"
printf '{%% for m in messages %%}\n{{ m.content + 1 }}{%% endfor %%}' >"$TMP/bad.jinja"

printf 'Once upon a time\n' | "$BIN" chat -m "$M" -n 4 --temp 0 --chat-template "$GOOD" >"$TMP/o" 2>"$TMP/e"; rc=$?
check "chat: a template file is used" '[ $rc -eq 0 ] && grep -q "template file" "$TMP/e"'
printf 'Once upon a time\n' | "$BIN" chat -m "$M" -n 4 --temp 0 --chat-template chatml >"$TMP/o" 2>"$TMP/e"; rc=$?
check "chat: a built-in by name" '[ $rc -eq 0 ] && grep -q "template chatml (chatml)" "$TMP/e"'
"$BIN" chat -m "$M" --chat-template no-such-template </dev/null >/dev/null 2>"$TMP/e"; rc=$?
check "chat: an unknown name is an error naming the built-ins" '[ $rc -ne 0 ] && grep -q "not a built-in (llama3, chatml, qwen3, llama2)" "$TMP/e"'
"$BIN" chat -m "$M" --chat-template "$TMP/bad.jinja" </dev/null >/dev/null 2>"$TMP/e"; rc=$?
check "chat: a failing template is an error with its line and column" '[ $rc -ne 0 ] && grep -q "bad.jinja.*line 2 column" "$TMP/e"'
"$BIN" run -m "$M" -p "Once" -n 2 --chat-template "$TMP/bad.jinja" >/dev/null 2>"$TMP/e"; rc=$?
check "run: a failing --chat-template is an error at start-up" '[ $rc -ne 0 ] && grep -q "TypeError" "$TMP/e"'
"$BIN" run -m "$M" -p "Once" -n 2 --temp 0 --chat-template llama3 >/dev/null 2>"$TMP/e"; rc=$?
check "run: a good --chat-template is accepted" '[ $rc -eq 0 ]'
timeout 60 "$BIN" serve -m "$M" --port 0 --chat-template "$TMP/bad.jinja" >/dev/null 2>"$TMP/e"; rc=$?
check "serve: a failing template stops start-up" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "line 2 column" "$TMP/e"'
finish
