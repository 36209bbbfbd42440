#!/bin/sh
# install.sh CMAKE BUILD_DIR SRC_DIR CC LIBDIR — `cmake --install` into a temporary prefix, then programs built
# against that prefix the way a user builds them:
#  - the files: LIBDIR/libreprise.so (-> the SONAME), LIBDIR/libreprise.a, include/reprise.h (and every other
#    header under include/), LIBDIR/pkgconfig/reprise.pc, LIBDIR/cmake/reprise/, bin/reprise, bin/reprise-bench, the LICENSE;
#    `reprise bench` of the installed reprise runs the installed reprise-bench;
#  - tests/library/smoke.c built with nothing but `pkg-config --cflags --libs reprise` (PKG_CONFIG_PATH at the
#    prefix): once against libreprise.so, once with `pkg-config --static` against libreprise.a (the archive named
#    as -l:libreprise.a, since a plain -lreprise picks the shared library beside it), which then runs with no
#    libreprise on the system;
#  - the same through find_package(reprise) (tests/library/consumer: reprise::reprise, reprise::reprise_static);
#  - every examples/NAME.c, built the same two ways, each binary run by examples/NAME.sh (below).
# ctest runs it as lib_install. In a sanitizer build (RP_SANITIZED=1) the programs get -fsanitize=address,undefined
# too: the instrumented library needs that runtime.
#
# To add an example: examples/NAME.c and examples/NAME.sh. `sh examples/NAME.sh BINARY` runs the example and
# checks its output; exit 0 passed, 77 skipped (print why: e.g. no model), anything else failed. It gets
# RP_SHARED_DIR (the models: $RP_SHARED_DIR/models/stories260K.gguf), RP_EXAMPLE_TMP (an empty directory of its
# own, e.g. for a cache dir), RP_BIN (the installed `reprise`, e.g. to compare with `reprise run`) and, for the
# shared build, LD_LIBRARY_PATH at the prefix's libraries. An example without its NAME.sh fails: a program that
# is only built checks nothing.
. "$(dirname "$0")/../cli/lib/common.sh"
cmake=$1 build=$2 src=$3 cc=$4 libdir=$5
work="${RP_TEST_TMP:-/tmp}/lib_install"
prefix="$work/prefix"
lib="$prefix/$libdir"
rm -rf "$work" && mkdir -p "$work" || exit 1
flags=""
[ "${RP_SANITIZED:-}" = 1 ] && flags="-fsanitize=address,undefined"
# tail_of FILE: the end of a log, indented, after a failure
tail_of() { tail -n 15 "$1" | sed 's/^/    /'; }

check "cmake --install $build --prefix <tmp>" '"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1'
[ "$fail" -eq 0 ] || { tail_of "$work/install.log"; finish; exit 1; }
for f in "$libdir/libreprise.so" "$libdir/libreprise.a" include/reprise.h "$libdir/pkgconfig/reprise.pc" \
         "$libdir/cmake/reprise/repriseConfig.cmake" "$libdir/cmake/reprise/repriseConfigVersion.cmake" bin/reprise \
         bin/reprise-bench share/doc/reprise/LICENSE; do
  check "installed $f" '[ -f "$prefix/$f" ]'
done
(cd "$src/include" && find . -name '*.h' | sort) >"$work/headers.src"
(cd "$prefix/include" && find . -name '*.h' | sort) >"$work/headers.installed"
check "installed every header under include/ ($(wc -l <"$work/headers.src"))" \
  'cmp -s "$work/headers.src" "$work/headers.installed"'
soname=$(readelf -d "$lib/libreprise.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "installed $libdir/$soname (the SONAME)" '[ -n "$soname" ] && [ -f "$lib/$soname" ]'

export PKG_CONFIG_PATH="$lib/pkgconfig"
ver=$(pkg-config --modversion reprise)
check "pkg-config --modversion reprise: $ver" '[ -n "$ver" ]'
check "bin/reprise --version says $ver" '"$prefix/bin/reprise" --version 2>/dev/null | grep -qx "reprise $ver"'
check "bin/reprise-bench --version says $ver" \
  '"$prefix/bin/reprise-bench" --version 2>/dev/null | grep -qx "reprise-bench $ver"'
check "bin/reprise bench --version runs the installed reprise-bench (PATH empty)" \
  '[ "$(PATH=/nonexistent "$prefix/bin/reprise" bench --version 2>&1)" = "reprise-bench $ver" ]'

# build NAME SOURCE KIND: $work/NAME-KIND from SOURCE with pkg-config's flags only; KIND is shared or static
build() {
  if [ "$3" = shared ]; then libs=$(pkg-config --libs reprise)
  else libs=$(pkg-config --static --libs reprise | sed 's/-lreprise\b/-l:libreprise.a/'); fi
  # shellcheck disable=SC2086 # word splitting of the flags is wanted
  "$cc" $flags -o "$work/$1-$3" "$2" $(pkg-config --cflags reprise) $libs >"$work/$1-$3.log" 2>&1
}
want="reprise $ver: not found"
for kind in shared static; do
  if build smoke "$src/tests/library/smoke.c" $kind; then ok "smoke.c builds with pkg-config ($kind)"
  else bad "smoke.c builds with pkg-config ($kind)"; tail_of "$work/smoke-$kind.log"; fi
done
check "smoke (shared) loads $soname" 'readelf -d "$work/smoke-shared" | grep -q "NEEDED.*\[$soname\]"'
out=$(LD_LIBRARY_PATH="$lib" "$work/smoke-shared" "$ver" 2>&1)
check "smoke (shared) runs: $out" '[ "$out" = "$want" ]'
check "smoke (static) needs no libreprise" \
  '[ -f "$work/smoke-static" ] && ! readelf -d "$work/smoke-static" | grep -q libreprise'
out=$("$work/smoke-static" "$ver" 2>&1)
check "smoke (static) runs (no LD_LIBRARY_PATH): $out" '[ "$out" = "$want" ]'

# find_package(reprise) from a project of its own
what="find_package(reprise): a project links reprise::reprise and reprise::reprise_static"
if "$cmake" -S "$src/tests/library/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
     -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" >"$work/consumer.log" 2>&1 &&
   "$cmake" --build "$work/consumer" >>"$work/consumer.log" 2>&1; then
  ok "$what"
  for kind in shared static; do
    out=$("$work/consumer/smoke_$kind" "$ver" 2>&1)
    check "find_package smoke_$kind runs: $out" '[ "$out" = "$want" ]'
  done
else
  bad "$what"; tail_of "$work/consumer.log"
fi

# examples/NAME.c + examples/NAME.sh
for c in "$src"/examples/*.c; do
  [ -f "$c" ] || continue
  name=$(basename "$c" .c)
  for kind in shared static; do
    what="examples/$name ($kind)"
    if ! build "$name" "$c" $kind; then
      bad "$what builds with pkg-config"; tail_of "$work/$name-$kind.log"; continue
    fi
    if [ ! -f "$src/examples/$name.sh" ]; then bad "$what: examples/$name.sh checks its output (missing)"; continue; fi
    mkdir -p "$work/run-$name-$kind"
    if [ $kind = shared ]; then ldp="$lib"; else ldp="${LD_LIBRARY_PATH:-}"; fi
    LD_LIBRARY_PATH="$ldp" RP_EXAMPLE_TMP="$work/run-$name-$kind" RP_BIN="$prefix/bin/reprise" \
      sh "$src/examples/$name.sh" "$work/$name-$kind" >"$work/$name-$kind.out" 2>&1
    rc=$?
    case $rc in
      0) ok "$what runs and its output checks" ;;
      77) skip=$((skip + 1)); echo "SKIP $what: $(tail -n 1 "$work/$name-$kind.out")" ;;
      *) bad "$what runs and its output checks (exit $rc)"; tail_of "$work/$name-$kind.out" ;;
    esac
  done
done

[ "$fail" -eq 0 ] && rm -rf "$work"
finish
