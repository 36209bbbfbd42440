# Cross build for 64-bit Arm Linux with Debian's toolchain (gcc-aarch64-linux-gnu) and the arm64 -dev packages
# of the dependencies (dpkg --add-architecture arm64; see scripts/arm_test.sh):
#   cmake -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The binaries run on an aarch64 machine or here under qemu-aarch64-static (binfmt or by name).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(RP_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${RP_CROSS_TRIPLE}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${RP_CROSS_TRIPLE})
# headers and libraries of the target come from the multiarch paths (/usr/include is shared)
set(CMAKE_FIND_ROOT_PATH /usr/${RP_CROSS_TRIPLE} /usr/lib/${RP_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config reads the target's .pc files
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${RP_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L /usr/${RP_CROSS_TRIPLE})
