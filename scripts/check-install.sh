#!/usr/bin/env bash
# Installs the C library into a temporary prefix, then builds and runs a
# consumer the way an application would: with pkg-config only, and with
# CMake's find_package (tests/cmake, the imported target hipobj::hipobj),
# each linked shared and static. Exits non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mktemp -d /tmp/hipobj-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
profile_flag=${HIPOBJ_INSTALL_PROFILE:---debug}
cd "$root"
cargo xtask install --prefix "$prefix" $profile_flag
for f in lib/libhipobj.so lib/libhipobj.so.0 lib/libhipobj.a lib/pkgconfig/hipobj.pc lib/cmake/hipobj/hipobj-config.cmake lib/cmake/hipobj/hipobj-config-version.cmake include/hipobj.h bin/hipobj bin/hipobj-server; do
    [ -e "$prefix/$f" ] || { echo "check-install: $f is missing" >&2; exit 1; }
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -Werror -pedantic tests/c/consumer.c $(pkg-config --cflags --libs hipobj) -o "$prefix/consumer"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer"
# The soname recorded in the consumer is the versioned one.
readelf -d "$prefix/consumer" | grep -q 'NEEDED.*libhipobj.so.0' || { echo "check-install: consumer does not need libhipobj.so.0" >&2; exit 1; }
# shellcheck disable=SC2046
cc -std=c99 tests/c/consumer.c $(pkg-config --cflags hipobj) "$prefix/lib/libhipobj.a" $(pkg-config --libs-only-l --static hipobj | sed 's/-lhipobj//') -o "$prefix/consumer-static"
"$prefix/consumer-static"
# CMake, as upstream hipObject's consumers do: find_package(hipobj CONFIG)
# and hipobj::hipobj, shared by default and static with HIPOBJ_USE_STATIC.
for kind in shared static; do
    use_static=OFF
    [ "$kind" = static ] && use_static=ON
    cmake -S tests/cmake -B "$prefix/cmake-$kind" -DCMAKE_PREFIX_PATH="$prefix" -DHIPOBJ_USE_STATIC=$use_static >/dev/null
    cmake --build "$prefix/cmake-$kind" >/dev/null
    "$prefix/cmake-$kind/consumer"
    if readelf -d "$prefix/cmake-$kind/consumer" | grep -q 'NEEDED.*libhipobj'; then linked=shared; else linked=static; fi
    [ "$linked" = "$kind" ] || { echo "check-install: the CMake consumer asked for $kind hipobj but is linked $linked" >&2; exit 1; }
done
"$prefix/bin/hipobj" --version | grep -q '^hipobj ' || { echo "check-install: bin/hipobj does not run" >&2; exit 1; }
"$prefix/bin/hipobj-server" --help >/dev/null || { echo "check-install: bin/hipobj-server does not run" >&2; exit 1; }
echo "check-install: install (library, header, pkg-config file, CMake package, CLI, server), pkg-config and CMake builds, shared and static links all work"
