#!/usr/bin/env bash
# Builds the real-verbs tests and runs them inside the rxe VM
# (scripts/rxe-vm.sh), in one boot:
#   - hipobj-ibverbs/tests/rxe.rs: the libibverbs backend on rxe0;
#   - hipobj/tests/rxe_e2e.rs: the library (client) and hipobj-target (server)
#     both on rxe0, PUT and GET with exact bytes.
# Extra arguments go to each test binary.
#
#   scripts/rxe-test.sh [TEST-ARGS...]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
backend=$(test_exe hipobj-ibverbs rxe)
e2e=$(test_exe hipobj rxe_e2e)
for exe in "$backend" "$e2e"; do
    [[ -n $exe && -x $exe ]] || { echo "rxe-test: could not build the rxe tests" >&2; exit 1; }
done
args="--ignored --test-threads=1 --nocapture $*"
exec scripts/rxe-vm.sh /bin/sh -c "$backend $args && $e2e $args"
