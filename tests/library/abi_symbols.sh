#!/bin/sh
# abi_symbols.sh LIB INCLUDE_DIR CC — libreprise.so exports the public API and nothing else:
#  - every dynamic symbol it defines starts with rp_: nothing internal leaks (the library is built with
#    -fvisibility=hidden; only what include/reprise.h marks RP_API is visible);
#  - each one is declared by the public headers (INCLUDE_DIR/*.h and below): a C file that includes them all and
#    takes every exported symbol's address must compile;
#  - every rp_ function those headers declare is exported (one declared without RP_API would be hidden, and a
#    program using it could not link against the .so). A `static inline` rp_ function in a public header would
#    need excluding here;
#  - the SONAME carries the major version (libreprise.so.N).
# ctest runs it (lib_abi_symbols) with the build's libreprise.so, include/ and compiler.
. "$(dirname "$0")/../cli/lib/common.sh"
lib=$1 cc=$3
[ -f "$lib" ] || { echo "FAIL no library at $lib"; exit 1; }
inc=$(cd "$2" && pwd) || exit 1
# show FILE TITLE: prints FILE's lines under TITLE when it is not empty
show() { [ -s "$1" ] && { echo "$2"; sed 's/^/  /' "$1"; }; return 0; }
tmp="${RP_TEST_TMP:-/tmp}/abi_symbols.$$"
mkdir -p "$tmp" && trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u >"$tmp/exported"
grep -v '^rp_' "$tmp/exported" >"$tmp/leaked"
check "only rp_ symbols exported ($(wc -l <"$tmp/exported") exported)" '[ ! -s "$tmp/leaked" ]'
show "$tmp/leaked" "not rp_-prefixed:"

# the public headers, all included by one file
find "$inc" -name '*.h' | sort | sed 's/.*/#include "&"/' >"$tmp/all.h"
{ cat "$tmp/all.h"; echo 'void abi_probe(void);'; echo 'void abi_probe(void) {'
  sed 's/.*/    (void)\&&;/' "$tmp/exported"; echo '}'; } >"$tmp/probe.c"
"$cc" -std=c11 -fsyntax-only -Werror -I"$inc" "$tmp/probe.c" >"$tmp/probe.log" 2>&1 || echo failed >>"$tmp/probe.log"
grep -E 'error|failed' "$tmp/probe.log" >"$tmp/undeclared"
check "every exported symbol is declared in $inc" '[ ! -s "$tmp/undeclared" ]'
show "$tmp/undeclared" "the compiler on a file that includes every public header and uses each exported symbol:"

# rp_NAME( in the preprocessed headers: every function they declare ("rp_x (*fn)" is a pointer, not a function)
"$cc" -E -P -I"$inc" -x c "$tmp/all.h" | grep -o '\brp_[A-Za-z0-9_]*[[:space:]]*([^*]' |
  sed 's/[[:space:]]*(.$//' | sort -u >"$tmp/declared"
check "the headers declare functions ($(wc -l <"$tmp/declared") found)" '[ -s "$tmp/declared" ]'
comm -23 "$tmp/declared" "$tmp/exported" >"$tmp/hidden"
check "every declared rp_ function is exported (RP_API)" '[ ! -s "$tmp/hidden" ]'
show "$tmp/hidden" "declared but not exported:"

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "SONAME $soname is libreprise.so.<major>" 'echo "$soname" | grep -Eq "^libreprise\.so\.[0-9]+$"'
finish
