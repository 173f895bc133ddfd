#!/usr/bin/env bash
# Runs every cargo-fuzz target for a fixed budget from its committed seed
# corpus (fuzz/corpus/<target>/), and fails on any crash, panic, broken
# invariant, leak or timeout. New inputs go to a scratch corpus, so the
# committed seeds stay as they are.
#
#   FUZZ_SECONDS   budget per target (default 30)
#   FUZZ_TARGETS   targets to run (default: every one `cargo fuzz list` names)
#   FUZZ_KEEP      a folder to keep each target's grown corpus in
#
# Installs cargo-fuzz (pinned) on first use; needs the nightly toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

CARGO_FUZZ_VERSION=0.13.1
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    # Built with stable: its own dependencies (rustix 0.36) do not build on
    # a recent nightly.
    cargo +stable install --locked "cargo-fuzz@$CARGO_FUZZ_VERSION"
fi

seconds="${FUZZ_SECONDS:-30}"
cd fuzz
targets="${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}"
cargo +nightly fuzz build -O
work="$(mktemp -d /tmp/hipobj-fuzz.XXXXXX)"
trap 'rm -rf "$work"' EXIT
summary=()
for t in $targets; do
    seeds="corpus/$t"
    [ -d "$seeds" ] && [ -n "$(ls -A "$seeds")" ] || { echo "FAIL: $t has no seed corpus in fuzz/$seeds" >&2; exit 1; }
    mkdir -p "$work/$t"
    log="$work/$t.log"
    echo "fuzz: $t for ${seconds}s from $(ls "$seeds" | wc -l) seeds"
    if ! cargo +nightly fuzz run -O "$t" "$work/$t" "$seeds" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        tail -60 "$log" >&2
        echo "FAIL: $t (the input is under fuzz/artifacts/$t/)" >&2
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    summary+=("$t: $runs runs, $cov, corpus $(ls "$work/$t" | wc -l) new + $(ls "$seeds" | wc -l) seeds, no crash")
    if [ -n "${FUZZ_KEEP:-}" ]; then
        mkdir -p "$FUZZ_KEEP/$t"
        cp -n "$work/$t"/* "$FUZZ_KEEP/$t/" 2>/dev/null || true
    fi
done
printf 'fuzz: %s\n' "${summary[@]}"
cd "$root"
