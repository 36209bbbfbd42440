#!/bin/sh
# arm_test.sh — the aarch64 build and its kernels under emulation: cross-compiles into build-aarch64/
# (cmake/aarch64-linux-gnu.cmake, Debian's gcc-aarch64-linux-gnu and the arm64 -dev packages) and runs the unit
# tests that matter under qemu-aarch64-static at several emulated CPU models, one per dispatch level:
#   max (SME, SVE2, I8MM, DotProd)   every kernel test (each checks every ARM kernel at or below the level
#                                    against the scalar reference: SME, I8MM, DotProd, NEON), the goldens
#   max,sve=off,sme=off (I8MM)       dispatch, the goldens
#   neoverse-n1 (DotProd, no I8MM)   dispatch, the element-wise kernels, the goldens; last, the thread pool, the
#                                    reuse engine and the scheduler (RP_TEST_SKIP leaves out test_sched's sampled
#                                    speculation distribution: minutes of sampling under qemu; ~280 s in all)
#   cortex-a72 (NEON only)           dispatch, the element-wise kernels, the goldens
# test_cpu checks each model's detected level (RP_TEST_EXPECT_CPU), lib_static_registry the kernels each level
# selects from libreprise.a, test_model the stories260K goldens (F32, Q8_0 and Q4_0 weights; F32, F16 and Q8_0
# KV) at the model's best level (RP_TEST_LEVELS=best): a few seconds a level (RP_ARM_GOLDENS=0 leaves them out).
# The guest's dynamic loader and libc come from one package, libc6:arm64 (-L /, see `sysroot` below): with
# Debian's cross loader (/usr/aarch64-linux-gnu, libc6-arm64-cross 2.36-8) the loader picks up the multiarch
# libc.so.6 (2.36-9+deb12uN, pulled in by the arm64 -dev packages) first, and the first pthread_create of any
# program then loops forever in pthread_create's walk of the stack cache (libc reads it from the loader's private
# _rtld_global, whose layout the two builds need not share): that, not emulation speed, is why test_model "took
# over 27 minutes without finishing its first golden" before (test_cpu, lib_static_registry and the kernel tests
# start no thread).
# Emulation proves correctness, not speed: qemu runs these 10-50x slower than native, hence the short list and
# a time budget; the rest of the suite runs natively (test_forward's flash-decoding check at depth 1,500 takes
# ~100 s a level under qemu, test_threadpool, test_reuse and test_sched minutes each).
#
# Then the portable target: a cross build for a CPU with no SIMD kernels of ours (ppc64le,
# cmake/ppc64le-linux-gnu.cmake: any architecture but x86-64 and aarch64 builds only the scalar references) and
# its dispatch, quantization and golden tests under qemu-ppc64le-static. (riscv64, the first choice, has no
# -dev packages in Debian 12's archive — it is a release architecture from Debian 13 on — so the dependencies
# could not be had; ppc64el has them.) riscv64 still gets the kernels: tests/portable/kernels_portable.c, built
# from the kernel sources alone with gcc-riscv64-linux-gnu and run under qemu-riscv64-static. RP_PORTABLE=0
# leaves both out, RP_PPC64LE=0 the ppc64le part (its "stack smashing detected" abort at start-up under qemu was the
# same loader / libc mismatch as aarch64's hang: it runs with -L / too).
#
# usage: sh scripts/arm_test.sh [--install]
#   --install: apt-get what is missing (dpkg --add-architecture arm64 / ppc64el; needs root or passwordless sudo)
# Exit status: 0 all passed, 1 a test failed or the build broke, 77 skipped (the toolchain, qemu or the arm64
# packages are missing and could not be installed: the reason is printed).
set -e
cd "$(dirname "$0")/.."
src=$(pwd)
dir=build-aarch64
triple=aarch64-linux-gnu
install=0
[ "${1:-}" = "--install" ] && install=1

LIBS="libpcre2-dev libjansson-dev libutf8proc-dev libxxhash-dev libsqlite3-dev libzstd-dev libmicrohttpd-dev \
libcmocka-dev"
# pkgs GCC_PACKAGE DEBIAN_ARCH: the cross compiler, qemu-user and the target's -dev packages
pkgs() { echo "$1 qemu-user-static $(for l in $LIBS; do printf '%s:%s ' "$l" "$2"; done)"; }

missing() {
  m=""
  for p in $1; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || m="$m $p"
  done
  echo "$m"
}

# ensure DEBIAN_ARCH "PACKAGES": 0 when all are there (installing them with --install), else sets why and 1
# (riscv64-cross: host packages only, no foreign architecture)
ensure() {
  miss=$(missing "$2")
  [ -n "$miss" ] || return 0
  [ "$install" = 1 ] || { why="missing packages:$miss (run with --install, or apt-get them)"; return 1; }
  if [ "$(id -u)" = 0 ]; then SUDO=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
  else why="missing packages:$miss and no root / passwordless sudo to install them"; return 1
  fi
  echo "arm_test: installing:$miss" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! { { [ "$1" = riscv64-cross ] || $SUDO dpkg --add-architecture "$1"; } && $SUDO apt-get update -qq >&2 &&
         $SUDO apt-get install -y -qq --no-install-recommends $miss >&2; }; then
    why="apt-get could not install:$miss (no network or no $1 archive?)"; return 1
  fi
  miss=$(missing "$2")
  [ -z "$miss" ] || { why="still missing after apt-get:$miss"; return 1; }
}

skip() { echo "arm_test: SKIP: $*"; exit 77; }

ensure arm64 "$(pkgs gcc-aarch64-linux-gnu arm64)" || skip "$why"
qemu=$(command -v qemu-aarch64-static) || skip "qemu-aarch64-static not on PATH"
# The guest's root for qemu -L: "/" where libc6:arm64 (multiarch, a dependency of the -dev packages) provides
# /lib/ld-linux-aarch64.so.1, so the loader matches the libc.so.6 it loads from /lib/aarch64-linux-gnu. The cross
# root /usr/aarch64-linux-gnu only where that package is absent: its loader 2.36-8 with the multiarch libc
# 2.36-9+deb12uN hangs in the first pthread_create (see the top).
sysroot=/
[ -e /lib/ld-linux-aarch64.so.1 ] || sysroot="/usr/$triple"

# ---- build: only the test programs run below (the library, CLI and the rest build natively) ----
t0=$(date +%s)
KERNEL_TESTS="test_quant test_ew test_attn test_mm_float test_mm_q4_0_q8_0 test_mm_kquants"
OTHER_TESTS="test_model test_threadpool test_reuse test_sched"   # the stories260K goldens; pool, reuse, scheduler
[ -f "$dir/CMakeCache.txt" ] ||
  cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$src/cmake/$triple.cmake" -DCMAKE_BUILD_TYPE=Release >/dev/null
# shellcheck disable=SC2086
cmake --build "$dir" -j"$(nproc)" --target test_cpu lib_static_registry $KERNEL_TESTS $OTHER_TESTS >/dev/null || {
  echo "arm_test: FAILED: the aarch64 cross build (cmake --build $dir)"; exit 1; }
echo "arm_test: cross build (aarch64) $(($(date +%s) - t0)) s"

# ---- the emulator's SME: Debian 12's qemu 7.2 computes the 4-way SMOPA (int8 -> int32) wrong, which fails the
# SME int8 kernels for the emulator's fault (tests/portable/sme_probe.c checks it against the definition). Then
# the runs use Debian 13's qemu (10.x, statically linked): its package is fetched with apt-get download from an
# apt configuration of its own under $dir/qemu13 (the system's sources and state are not touched) and only the
# qemu-aarch64 binary is kept. Where that is not possible the `max` (SME) runs are skipped, said so, not failed.
"$triple-gcc" -O2 -o "$dir/sme_probe" tests/portable/sme_probe.c
probe() { "$1" -L "$sysroot" -cpu max "$dir/sme_probe"; }
fetch_qemu13() {
  q="$src/$dir/qemu13"
  [ -x "$q/qemu-aarch64" ] && return 0
  mkdir -p "$q/lists/partial" "$q/cache/archives/partial"
  echo "deb http://deb.debian.org/debian trixie main" > "$q/sources.list"
  set -- -o Dir::Etc::SourceList="$q/sources.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$q/lists" \
    -o Dir::Cache="$q/cache" -o APT::Architectures=amd64 -o Debug::NoLocking=1
  { apt-get "$@" update -qq && (cd "$q" && apt-get "$@" download qemu-user) &&
    dpkg-deb --fsys-tarfile "$q"/qemu-user_*.deb | tar -x -O ./usr/bin/qemu-aarch64 > "$q/qemu-aarch64" &&
    chmod +x "$q/qemu-aarch64" && rm -f "$q"/qemu-user_*.deb; } >/dev/null 2>&1
}
sme_runs=1
if ! probe "$qemu" >/dev/null 2>&1; then
  if fetch_qemu13 && probe "$src/$dir/qemu13/qemu-aarch64"; then
    qemu="$src/$dir/qemu13/qemu-aarch64"
    echo "arm_test: $(command -v qemu-aarch64-static) gets SMOPA wrong; using $("$qemu" --version | head -1)"
  else
    sme_runs=0
    echo "arm_test: the emulator gets SME's SMOPA wrong and no newer qemu could be had: the -cpu max runs are skipped"
  fi
fi

# ---- runs: "qemu cpu model | expected level | tests", cheapest first ----
# Every kernel test checks every kernel at or below the machine's level, so the max run covers the NEON, DotProd
# and I8MM kernels; the other models check that dispatch picks what they have (test_cpu, lib_static_registry) and
# run what their level selects.
# The stories260K goldens at each model's best level (test_model, RP_TEST_LEVELS=best, 5-10 s each) come right
# after the dispatch checks, before the kernel tests, so the time budget does not skip them; RP_ARM_GOLDENS=0
# leaves them out.
g=test_model
[ "${RP_ARM_GOLDENS:-1}" != 0 ] || g=""
RUNS="cortex-a72|neon|test_cpu lib_static_registry test_ew $g
neoverse-n1|dotprod|test_cpu lib_static_registry test_ew $g
max,sve=off,sme=off|i8mm|test_cpu lib_static_registry $g
max|sme|test_cpu lib_static_registry $g test_quant test_ew test_mm_q4_0_q8_0 test_mm_float test_attn
max|sme|test_mm_kquants
neoverse-n1|dotprod|test_threadpool test_reuse test_sched"
# CI budget: runs that would start after this many seconds are skipped (listed as such, not failed)
budget=${RP_ARM_BUDGET:-900}
# the statistical test that samples for minutes under emulation (it runs natively)
export RP_TEST_SKIP="${RP_TEST_SKIP-*distribution*}"

export RP_SHARED_DIR="${RP_SHARED_DIR:-$src/../shared}"
export RP_TEST_TMP="$src/$dir/testtmp"
mkdir -p "$RP_TEST_TMP" "$dir/Testing"
fails=0
runs=0
skipped=0
echo "$RUNS" > "$dir/Testing/arm-runs.txt"
while IFS='|' read -r model level tests; do
  for t in $tests; do
    log="$dir/Testing/$t.$(echo "$model" | tr ',=' '__').log"
    bin="$dir/$t"
    s=$(date +%s)
    rc=0
    if [ "$sme_runs" = 0 ] && case $model in max | max,sme-*) true ;; *) false ;; esac; then
      echo "arm_test: [-cpu $model -> $level] $t: skipped (the emulator's SMOPA is wrong)"
      skipped=$((skipped + 1))
      continue
    fi
    if [ $(($(date +%s) - t0)) -ge "$budget" ]; then
      echo "arm_test: [-cpu $model -> $level] $t: skipped (past the ${budget} s budget, RP_ARM_BUDGET)"
      skipped=$((skipped + 1))
      continue
    fi
    # RP_POOL_SPIN=0: no spin-waits in the thread pool (its setting for emulators: a spinner takes a core)
    RP_POOL_SPIN=0 RP_TEST_EXPECT_CPU=$level RP_TEST_LEVELS=best timeout 900 "$qemu" -L "$sysroot" -cpu "$model" "$bin" >"$log" 2>&1 || rc=$?
    runs=$((runs + 1))
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1)
    case $rc in
      0) res="passed" ;;
      77) res="skipped" ;;
      124) res="FAILED (timed out)"; fails=$((fails + 1)) ;;
      *) res="FAILED (exit $rc)"; fails=$((fails + 1)) ;;
    esac
    echo "arm_test: [-cpu $model -> $level] $t: $res, ${summary:-no summary} ($(($(date +%s) - s)) s)"
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || tail -n 30 "$log"
  done
done < "$dir/Testing/arm-runs.txt"
echo "arm_test: $runs runs, $fails failed, $skipped skipped, $(($(date +%s) - t0)) s in all"

# ---- the portable target: scalar references only ----
if [ "${RP_PORTABLE:-1}" != 0 ]; then
  pdir=build-ppc64le
  ptriple=powerpc64le-linux-gnu
  # RP_PPC64LE=0 leaves it out (the riscv64 kernel run below stays on)
  if [ "${RP_PPC64LE:-1}" = 0 ]; then
    echo "arm_test: portable target (ppc64le) skipped: RP_PPC64LE=0"
  elif ! ensure ppc64el "$(pkgs gcc-powerpc64le-linux-gnu ppc64el)"; then
    echo "arm_test: portable target (ppc64le) skipped: $why"
  elif ! pqemu=$(command -v qemu-ppc64le-static); then
    echo "arm_test: portable target (ppc64le) skipped: qemu-ppc64le-static not on PATH"
  else
    p0=$(date +%s)
    # the guest's root as for aarch64 (see `sysroot`): the multiarch libc6:ppc64el's /lib64/ld64.so.2 with its own
    # libc; the cross loader (/usr/powerpc64le-linux-gnu, 2.36-8) with the multiarch libc.so.6 aborts every program
    # at start-up with "*** stack smashing detected ***"
    psysroot=/
    [ -e /lib64/ld64.so.2 ] || psysroot="/usr/$ptriple"
    PTESTS="test_cpu test_quant test_model"
    [ -f "$pdir/CMakeCache.txt" ] ||
      cmake -S . -B "$pdir" -DCMAKE_TOOLCHAIN_FILE="$src/cmake/ppc64le-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release \
        >/dev/null
    # shellcheck disable=SC2086
    if ! cmake --build "$pdir" -j"$(nproc)" --target $PTESTS >/dev/null; then
      echo "arm_test: FAILED: the ppc64le cross build (cmake --build $pdir)"; fails=$((fails + 1))
    else
      echo "arm_test: cross build (ppc64le) $(($(date +%s) - p0)) s"
      mkdir -p "$pdir/Testing" "$pdir/testtmp"
      for t in $PTESTS; do
        log="$pdir/Testing/$t.log"
        s=$(date +%s)
        rc=0
        # the only level is scalar: test_cpu expects it, the SIMD-kernel tests skip what has no kernel here
        RP_TEST_TMP="$src/$pdir/testtmp" RP_POOL_SPIN=0 RP_TEST_EXPECT_CPU=scalar timeout 900 "$pqemu" \
          -L "$psysroot" "$pdir/$t" >"$log" 2>&1 || rc=$?
        summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1)
        case $rc in
          0) res="passed" ;;
          77) res="skipped" ;;
          124) res="FAILED (timed out)"; fails=$((fails + 1)) ;;
          *) res="FAILED (exit $rc)"; fails=$((fails + 1)) ;;
        esac
        runs=$((runs + 1))
        echo "arm_test: [ppc64le -> scalar] $t: $res, ${summary:-no summary} ($(($(date +%s) - s)) s)"
        [ "$rc" = 0 ] || [ "$rc" = 77 ] || tail -n 30 "$log"
      done
    fi
  fi
  # riscv64: the kernel sources alone (no -dev packages needed), tests/portable/kernels_portable.c
  if ! ensure riscv64-cross "gcc-riscv64-linux-gnu libc6-dev-riscv64-cross qemu-user-static"; then
    echo "arm_test: riscv64 kernels skipped: $why"
  elif ! rqemu=$(command -v qemu-riscv64-static); then
    echo "arm_test: riscv64 kernels skipped: qemu-riscv64-static not on PATH"
  else
    mkdir -p build-riscv64
    s=$(date +%s)
    rc=0
    ver=$(sed -n 's/^project(reprise VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
    # shellcheck disable=SC2046
    riscv64-linux-gnu-gcc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE "-DRP_VERSION_STRING=\"$ver\"" -Isrc -Iinclude \
      -o build-riscv64/kernels_portable \
      tests/portable/kernels_portable.c src/core/error.c src/kernels/cpu.c src/kernels/registry.c \
      src/kernels/types.c $(ls src/kernels/ref/*.c) -lm -lpthread >build-riscv64/build.log 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
      echo "arm_test: FAILED: the riscv64 cross build of the kernels"; tail -n 20 build-riscv64/build.log
      fails=$((fails + 1))
    else
      "$rqemu" -L /usr/riscv64-linux-gnu build-riscv64/kernels_portable >build-riscv64/run.log 2>&1 || rc=$?
      summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' build-riscv64/run.log | tail -1)
      [ "$rc" = 0 ] && res="passed" || { res="FAILED (exit $rc)"; fails=$((fails + 1)); tail -n 30 build-riscv64/run.log; }
      runs=$((runs + 1))
      echo "arm_test: [riscv64 -> scalar] kernels_portable: $res, ${summary:-no summary} ($(($(date +%s) - s)) s)"
    fi
  fi
  echo "arm_test: with the portable targets: $runs runs, $fails failed, $(($(date +%s) - t0)) s in all"
fi
[ "$fails" = 0 ]
