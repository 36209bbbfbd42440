# Cross build for 64-bit Arm Linux with Debian's toolchain (gcc-aarch64-linux-gnu) and the arm64 -dev packages
# of the dependencies (dpkg --add-architecture arm64; scripts/arm_test.sh --install does it):
#   cmake -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The binaries run on an aarch64 machine, or here under qemu-aarch64-static -L /usr/aarch64-linux-gnu.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(RP_CROSS_TRIPLE aarch64-linux-gnu)
set(RP_CROSS_QEMU qemu-aarch64-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross-linux-gnu.cmake)
