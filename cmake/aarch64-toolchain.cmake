# Cross build for aarch64-linux-gnu with Debian's cross compilers (g++-aarch64-linux-gnu),
# running what it builds under qemu-user. Use: cmake -DCMAKE_TOOLCHAIN_FILE=<this file> ...
# CTest and gtest_discover_tests prefix every test command with the emulator, so AArch64 test
# programs run unchanged on an x86 host (binfmt_misc is not needed).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# The cross libc's root: qemu's -L makes the dynamic loader and libc come from it.
set(KILN_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR "qemu-aarch64;-L;${KILN_AARCH64_SYSROOT}")
