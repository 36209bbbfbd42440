#!/bin/sh
# deps.sh — installs the Debian 12 packages Reprise needs to build and test, when it can.
# As root (or with passwordless sudo) it runs apt-get; otherwise it prints the exact command.
set -e
# python3-*: the Python package's test (tests/cli/python_api.sh: a venv, an offline `pip install ./python`);
# python3-jinja2: the reference renderer of the chat-template parity test (tests/test_template_parity.c)
# libvulkan-dev + glslc: the Vulkan GPU backend (headers, the loader, the shader compiler); mesa-vulkan-drivers:
# lavapipe, Vulkan on the CPU, so the GPU tests (tests/gpu) run with no GPU; spirv-tools: spirv-val / spirv-dis
PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev libpcre2-dev libjansson-dev libutf8proc-dev \
libxxhash-dev libsqlite3-dev libzstd-dev libmicrohttpd-dev libcmocka-dev \
python3 python3-venv python3-pip python3-setuptools python3-wheel python3-jinja2 \
libvulkan-dev glslc mesa-vulkan-drivers spirv-tools"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "reprise: installing missing build dependencies:$missing" >&2
if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
else
  echo "reprise: cannot install packages (not root, no passwordless sudo). Run:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq $missing >&2
