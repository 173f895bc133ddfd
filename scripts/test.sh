#!/usr/bin/env bash
# The test command: the whole workspace's tests, then the install check.
# .ci/run installs the Debian packages these need and calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
# The C-level tests link the shared library itself, which `cargo test`
# builds only as an rlib: build the cdylib and staticlib first. The Rust
# example is run by a test too: build it first as well.
cargo build -p hipobj-capi
cargo build -p hipobj-s3 --examples
cargo test --workspace --all-targets
cargo test --workspace --doc
scripts/check-install.sh
