#!/usr/bin/env bash
# Builds the real-verbs test of the libibverbs backend and runs it inside the
# rxe VM (scripts/rxe-vm.sh). Extra arguments go to the test binary.
#
#   scripts/rxe-test.sh [TEST-ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
exe=$(cargo test -p hipobj-ibverbs --test rxe --no-run --message-format=json |
    grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
[[ -n $exe && -x $exe ]] || { echo "rxe-test: could not build the rxe test" >&2; exit 1; }
exec scripts/rxe-vm.sh "$exe" --ignored --test-threads=1 --nocapture "$@"
