#!/bin/bash
# grammar_cli.sh — `reprise run --grammar-file / --json-schema-file`: the output follows the grammar, a bad grammar
# fails with its line:column, and `reprise serve --grammar-file` refuses a bad file before loading.
. "$(dirname "$0")/lib/common.sh"
bin=${RP_BIN:?RP_BIN not set}
shared=${RP_SHARED_DIR:-$RP_SHARED_DEFAULT}
model=$shared/models/stories260K.gguf
[ -f "$model" ] || skip_all "no $model"
tmp=${RP_TEST_TMP:-/tmp}/grammar_cli.$$
mkdir -p "$tmp" && trap 'rm -rf "$tmp"' EXIT
printf 'root ::= "The " ("cat" | "dog") " is " [a-z]+ "."\n' >"$tmp/g.gbnf"
out=$("$bin" run -m "$model" -p "Once" --temp 0 -n 40 --grammar-file "$tmp/g.gbnf" 2>/dev/null)
check "run --grammar-file output matches the grammar ('$out')" '[[ "$out" =~ ^The\ (cat|dog)\ is\ [a-z]+\.$ ]]'
echo '{"type":"object","properties":{"a":{"type":"integer"},"b":{"enum":["x","y"]}},"required":["a","b"]}' >"$tmp/s.json"
out=$("$bin" run -m "$model" -p "Once" --temp 0 -n 80 --json-schema-file "$tmp/s.json" 2>/dev/null)
check "run --json-schema-file output validates ('$out')" "python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert set(o)=={\"a\",\"b\"} and isinstance(o[\"a\"],int) and o[\"b\"] in (\"x\",\"y\")' \"\$out\""
printf 'root ::= foo\n' >"$tmp/bad.gbnf"
"$bin" run -m "$model" -p "x" --grammar-file "$tmp/bad.gbnf" >"$tmp/o" 2>"$tmp/e"; rc=$?
check "run with a bad grammar fails (rc $rc)" '[ "$rc" -ne 0 ]'
check "the error names line:column" 'grep -q "1:10: undefined rule" "$tmp/e"'
"$bin" serve -m "$model" --port 0 --grammar-file "$tmp/bad.gbnf" >"$tmp/o" 2>"$tmp/e"; rc=$?
check "serve with a bad grammar file fails at start (rc $rc)" '[ "$rc" -ne 0 ] && grep -q "undefined rule" "$tmp/e"'
finish
