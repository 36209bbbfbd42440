# Cross build for 64-bit little-endian POWER Linux (gcc-powerpc64le-linux-gnu, the ppc64el -dev packages): a target
# with no SIMD kernels of ours, so it checks that the build and the scalar references work anywhere else.
#   cmake -B build-ppc64le -DCMAKE_TOOLCHAIN_FILE=cmake/ppc64le-linux-gnu.cmake
# The binaries run here under qemu-ppc64le-static -L /usr/powerpc64le-linux-gnu.
set(CMAKE_SYSTEM_PROCESSOR ppc64le)
set(RP_CROSS_TRIPLE powerpc64le-linux-gnu)
set(RP_CROSS_QEMU qemu-ppc64le-static)
include(${CMAKE_CURRENT_LIST_DIR}/cross-linux-gnu.cmake)
