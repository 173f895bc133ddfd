#!/usr/bin/env bash
# Runs the concurrency tests under ThreadSanitizer (nightly, with std rebuilt
# instrumented). Fails on any data-race report.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup component add --toolchain nightly rust-src >/dev/null 2>&1 || true
export RUSTFLAGS="-Zsanitizer=thread"
export RUSTDOCFLAGS="-Zsanitizer=thread"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/tsan}
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
target=$(rustc -vV | sed -n 's/^host: //p')
cargo +nightly test -Zbuild-std --target "$target" -p hipobj --test stress --test transfers -- --test-threads=4
