# Shared part of the cross toolchain files (aarch64-linux-gnu.cmake, ppc64le-linux-gnu.cmake): Debian's cross gcc
# for RP_CROSS_TRIPLE, the target's -dev packages from the multiarch paths (dpkg --add-architecture ARCH), and
# qemu-user (RP_CROSS_QEMU) as the emulator for running what was built.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${RP_CROSS_TRIPLE}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${RP_CROSS_TRIPLE})
# headers and libraries of the target come from the multiarch paths (/usr/include is shared)
set(CMAKE_FIND_ROOT_PATH /usr/${RP_CROSS_TRIPLE} /usr/lib/${RP_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config reads the target's .pc files
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${RP_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_CROSSCOMPILING_EMULATOR ${RP_CROSS_QEMU} -L /usr/${RP_CROSS_TRIPLE})
