#!/bin/sh
# gpu-check.sh OUTDIR — the GPU backend on a real GPU (for a machine such as the H200 one): builds with the
# Vulkan backend, lists the devices, runs the GPU tests (tests/gpu) and `reprise bench model -ngl all` on a
# synthetic llama-3.2-1b-shape Q4_0 model, and writes everything to OUTDIR (summary.txt first). Sized to finish
# under ~8 minutes on 16 cores: one build, the GPU tests and the benchmark each with a timeout.
#
# That machine has no Vulkan loader installed, so the loader must travel with the tree. This script does not
# fetch or carry one; whoever runs it puts libvulkan.so.1 (Debian's libvulkan1, the same version as here) at
# one of these, or names it with RP_VULKAN_LIB:
#   shared/vulkan/libvulkan.so.1, third_party/vulkan/libvulkan.so.1   (paths relative to the repository root)
# Building also needs <vulkan/vulkan.h> and glslc; where the machine lacks them, either carry them too
# (RP_VULKAN_INCLUDE_DIR=DIR holding vulkan/vulkan.h, RP_GLSLC=/path/to/glslc) or carry a build made elsewhere
# with -DRP_VULKAN=ON and name it with RP_BUILD_DIR (its test binaries are then run as they are).
# The driver: NVIDIA's Vulkan ICD is the JSON the driver installs (nvidia_icd.json); when no JSON is found but
# libGLX_nvidia.so.0 is (in containers: NVIDIA_DRIVER_CAPABILITIES must include graphics), one is written to
# OUTDIR and named with VK_ICD_FILENAMES.
set -u
OUT=${1:?usage: scripts/gpu-check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SUM="$OUT/summary.txt"
: >"$SUM"
note() { echo "$*" | tee -a "$SUM"; }
rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
note "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(nproc) cores), commit $rev"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1

# ---- the loader ----
if [ -z "${RP_VULKAN_LIB:-}" ]; then
  for c in "$ROOT/shared/vulkan/libvulkan.so.1" "$ROOT/third_party/vulkan/libvulkan.so.1"; do
    [ -f "$c" ] && RP_VULKAN_LIB=$c && break
  done
fi
if [ -z "${RP_VULKAN_LIB:-}" ]; then
  for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/lib/aarch64-linux-gnu; do
    [ -f "$d/libvulkan.so.1" ] && RP_VULKAN_LIB="$d/libvulkan.so.1" && break
  done
fi
if [ -z "${RP_VULKAN_LIB:-}" ]; then
  note "FAIL: no Vulkan loader: put libvulkan.so.1 at shared/vulkan/ or third_party/vulkan/, or set RP_VULKAN_LIB"
  exit 2
fi
export RP_VULKAN_LIB
note "loader: $RP_VULKAN_LIB"

# ---- the driver (ICD) ----
if [ -z "${VK_ICD_FILENAMES:-}" ] && [ -z "${VK_DRIVER_FILES:-}" ]; then
  icd=""
  for d in /etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
    [ -f "$d/nvidia_icd.json" ] && icd="$d/nvidia_icd.json" && break
  done
  if [ -z "$icd" ]; then
    glx=""
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/nvidia/lib64; do
      [ -f "$d/libGLX_nvidia.so.0" ] && glx="$d/libGLX_nvidia.so.0" && break
    done
    if [ -n "$glx" ]; then
      icd="$OUT/nvidia_icd.json"
      printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$glx" >"$icd"
    fi
  fi
  if [ -n "$icd" ]; then
    export VK_ICD_FILENAMES="$icd" VK_DRIVER_FILES="$icd"
    note "icd: $icd"
  else
    note "icd: none found (no nvidia_icd.json, no libGLX_nvidia.so.0): the loader will see only other drivers"
  fi
fi

# ---- build ----
B=${RP_BUILD_DIR:-$ROOT/build-gpu}
if [ -n "${RP_BUILD_DIR:-}" ] && [ -x "$B/test_gpu_ops" ]; then
  note "build: using $B as carried"
else
  extra=""
  [ -n "${RP_VULKAN_INCLUDE_DIR:-}" ] && extra="$extra -DRP_VULKAN_INCLUDE_DIR=$RP_VULKAN_INCLUDE_DIR"
  [ -n "${RP_GLSLC:-}" ] && extra="$extra -DRP_GLSLC=$RP_GLSLC"
  # shellcheck disable=SC2086
  if ! { cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DRP_VULKAN=ON $extra &&
         cmake --build "$B" -j"$(nproc)" --target reprise reprise-bench test_gpu_core test_gpu_ops test_gpu_forward \
           test_gpu_offload; } \
       >"$OUT/build.log" 2>&1; then
    note "FAIL: build (see build.log; the last lines:)"
    tail -15 "$OUT/build.log" | tee -a "$SUM"
    exit 1
  fi
  note "build: ok ($B)"
fi

# ---- devices ----
"$B/reprise" inspect --system >"$OUT/inspect.txt" 2>&1
sed -n '/^gpu:/,$p' "$OUT/inspect.txt" | tee -a "$SUM"
if ! grep -q '^  \[0\]' "$OUT/inspect.txt"; then
  note "FAIL: no Vulkan device visible"
  exit 1
fi
# the real GPU, not lavapipe, when there is one: the backend prefers discrete / integrated devices by itself;
# RP_GPU_DEVICE (an index or a piece of the name) overrides

# ---- GPU tests ----
# models for test_gpu_forward: $RP_SHARED_DIR, else shared/ in the tree, else ../shared beside it
if [ -z "${RP_SHARED_DIR:-}" ]; then
  if [ -d "$ROOT/shared/models" ]; then RP_SHARED_DIR=$ROOT/shared; else RP_SHARED_DIR=$ROOT/../shared; fi
fi
export RP_SHARED_DIR
fails=0
for t in test_gpu_core test_gpu_ops test_gpu_forward test_gpu_offload; do
  [ -x "$B/$t" ] || { note "$t: not built"; continue; }
  start=$(date +%s)
  timeout 240 "$B/$t" >"$OUT/$t.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  case $rc in
    0) verdict=pass ;;
    77) verdict="skipped ($(grep -m1 'SKIP:' "$OUT/$t.log"))" ;;
    124) verdict="TIMEOUT (240 s)"; fails=$((fails + 1)) ;;
    *) verdict="FAIL (rc $rc)"; fails=$((fails + 1)) ;;
  esac
  note "$t: $verdict, ${secs} s — $(tail -1 "$OUT/$t.log") — on $(grep -m1 '^gpu: ' "$OUT/$t.log" | cut -c6-)"
done
grep -h 'positions, worst' "$OUT"/test_gpu_forward.log 2>/dev/null | tee -a "$SUM"
if command -v nvidia-smi >/dev/null 2>&1 && grep -qh '^gpu: .*(cpu, ' "$OUT"/test_gpu_*.log 2>/dev/null; then
  note "WARNING: an NVIDIA GPU is present but the tests ran on a CPU device (lavapipe): the NVIDIA ICD was not found"
  fails=$((fails + 1))
fi
# the staging path (what a discrete GPU uses for uploads) on the same device
RP_GPU_STAGING=1 timeout 120 "$B/test_gpu_core" >"$OUT/test_gpu_core_staging.log" 2>&1
rc=$?
[ $rc -eq 0 ] || fails=$((fails + 1))
note "test_gpu_core (RP_GPU_STAGING=1): rc $rc — $(tail -1 "$OUT/test_gpu_core_staging.log")"
# ---- bench model -ngl all on a synthetic llama-3.2-1b-shape model (random weights: speed only) ----
L1B="$OUT/llama-3.2-1b-q4_0.synth.gguf"
start=$(date +%s)
if timeout 180 "$B/reprise" synth --arch llama --preset llama-3.2-1b --type q4_0 -t "$(nproc)" -o "$L1B" \
     >"$OUT/synth.log" 2>&1; then
  timeout 300 "$B/reprise" bench model -m "$L1B" -p 512 -n 64 -r 3 -t 4 -ngl all --json \
    >"$OUT/bench_model_gpu.json" 2>"$OUT/bench_model_gpu.log"
  rc=$?
  [ $rc -eq 0 ] || fails=$((fails + 1))
  note "bench model -ngl all (llama-3.2-1b shape, q4_0): rc $rc, $(( $(date +%s) - start )) s — $(grep -m1 'gpu: ' "$OUT/bench_model_gpu.log")"
  python3 - "$OUT/bench_model_gpu.json" <<'PYEOF' | tee -a "$SUM"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print("  (no JSON rows: %s)" % e); sys.exit(0)
for r in rows:
    print("  %-8s %10.2f tok/s median (min %.2f, max %.2f), gpu_layers %s" % (r["test"], r["tok_s_median"],
          r["tok_s_min"], r["tok_s_max"], r.get("gpu_layers")))
PYEOF
  rm -f "$L1B"
else
  fails=$((fails + 1))
  note "FAIL: reprise synth (see synth.log)"
fi
note "result: $fails failing"
[ $fails -eq 0 ]
