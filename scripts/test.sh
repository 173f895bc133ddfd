#!/usr/bin/env bash
# The test command: the whole workspace's tests, then the install check.
# .ci/run installs the Debian packages these need and calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
cargo test --workspace --doc
scripts/check-install.sh
