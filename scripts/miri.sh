#!/usr/bin/env bash
# Runs the tests Miri can run (no FFI, no dlopen, no sockets) under Miri on
# the nightly toolchain: the wire formats, the platform seams and fakes, and
# the library core on the fake platform.
# Leaks are expected: tests leak their host buffers on purpose, and one test
# checks that a staging buffer a running copy may still use is leaked.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1 || true
export MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-ignore-leaks"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/miri}
cargo +nightly miri test -p hipobj-proto -p hipobj-platform --lib
cargo +nightly miri test -p hipobj --lib --test lifecycle --test buffers --test transfers --test client
