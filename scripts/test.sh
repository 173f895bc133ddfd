#!/usr/bin/env bash
# The test command: the size rule, the whole workspace's tests, then the
# install check.
# .ci/run installs the Debian packages these need and calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
# The C-level tests link the shared library itself, which `cargo test`
# builds only as an rlib, and a test runs the Rust example: build every
# target first (the cdylib and staticlib included), with the features
# `cargo test` uses, so that the test run compiles nothing again.
# No production function over 120 lines, no production file over 1000
# (issue 40; scripts/sizes.py names any that are).
python3 scripts/sizes.py
cargo build --workspace --all-targets
cargo test --workspace --all-targets
cargo test --workspace --doc
scripts/check-install.sh
