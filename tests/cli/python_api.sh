#!/bin/bash
# python_api.sh — the Python package (python/) as a user installs it: a virtual environment in the test's tmp
# dir (--system-site-packages: the build uses Debian's setuptools and wheel), `pip install` of a copy of python/
# offline (--no-index, --no-build-isolation; the copy because setuptools writes build/ and *.egg-info into the
# directory it builds), then python/tests/run.py (unittest) from outside the source tree, against the built
# libreprise.so through REPRISE_LIBRARY. Its tests skip the cases that need ../shared when it is absent;
# they exit 77 when every one skipped. The counts here include theirs.
set -u
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${RP_BIN:?RP_BIN must point at the reprise binary}"
LIB="${RP_LIB:-$(dirname "$BIN")/libreprise.so}"
CC="${RP_CC:-cc}"
TMP="${RP_TEST_TMP:-/tmp}/python_api.$$"
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib/common.sh"

# Debian's python3 (the packages scripts/deps.sh installs), unless RP_PYTHON names another
PY="${RP_PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
V="$TMP/venv"
check "libreprise.so is built ($LIB)" '[ -e "$LIB" ]'
if ! "$PY" -m venv --system-site-packages "$V" >"$TMP/venv.log" 2>&1; then
  bad "$PY -m venv --system-site-packages (Debian: apt-get install python3-venv; see scripts/deps.sh)"
  sed 's/^/    /' "$TMP/venv.log" | tail -n 5; finish; exit 1
fi
ok "$PY -m venv --system-site-packages"
cp -r "$SRC/python" "$TMP/src"
rm -rf "$TMP/src/build" "$TMP/src"/*.egg-info
if "$V/bin/pip" --isolated install --no-index --no-build-isolation --no-deps --disable-pip-version-check \
     "$TMP/src" >"$TMP/pip.log" 2>&1; then
  ok "pip install --no-index --no-build-isolation ./python (offline)"
else
  bad "pip install --no-index --no-build-isolation ./python (Debian: python3-pip python3-setuptools python3-wheel)"
  sed 's/^/    /' "$TMP/pip.log" | tail -n 15; finish; exit 1
fi
mkdir -p "$TMP/work" "$TMP/t"
cd "$TMP/work" || exit 1
# ASan builds: the instrumented library needs the ASan runtime first in the process (Python is not built with it)
pre=""
if [ "${RP_SANITIZED:-}" = 1 ]; then
  pre=$("$CC" -print-file-name=libasan.so)   # gcc's; clang's shared runtime has another name
  [ -f "$pre" ] || pre=$("$CC" -print-file-name="libclang_rt.asan-$(uname -m).so")
  export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}"
fi
# pyrun ARGS: the venv's python, with the built library
pyrun() { LD_PRELOAD="$pre" REPRISE_LIBRARY="$LIB" "$V/bin/python" "$@"; }
where=$(pyrun -c 'import reprise, sys; print(reprise.__file__.startswith(sys.prefix))' 2>&1)
check "import reprise finds the installed copy, not the source tree ($where)" '[ "$where" = True ]'

REPRISE_INCLUDE="$SRC/include" REPRISE_TEST_INSTALLED=1 RP_CC="$CC" RP_TEST_TMP="$TMP/t" \
  pyrun "$SRC/python/tests/run.py" -v >"$TMP/unittest.log" 2>&1
rc=$?
cat "$TMP/unittest.log"
counts=$(tail -n 1 "$TMP/unittest.log")
case "$counts" in
  *" passed, "*" failed, "*" skipped")
    set -- $counts
    pass=$((pass + $1)); fail=$((fail + $3)); skip=$((skip + $5)) ;;
  *) bad "python/tests/run.py ended without its summary line (exit $rc)" ;;
esac
[ $rc -eq 0 ] || [ $rc -eq 77 ] || [ "$fail" -gt 0 ] || bad "python/tests/run.py exit $rc"
if [ $rc -eq 77 ] && [ "$fail" -eq 0 ]; then
  echo "SKIP every Python test skipped"; echo "$pass passed, $fail failed, $skip skipped"; exit 77
fi
finish
