#!/usr/bin/env bash
# hipobj-server's RDMA data path on a real verbs device: builds the server
# binary and crates/hipobj-server/tests/rdma_rxe.rs, then runs the test in
# the rxe VM (scripts/rxe-vm.sh), where it starts the server as a second
# process on rxe0 and drives it with the hipobj library over aws-sdk-s3.
# Extra arguments go to the test binary. HIPOBJ_RXE_BIG sets the size of
# the large object (default 64 MiB).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
build_workspace >/dev/null
exe=$(test_exe hipobj-server rdma_two_process)
[[ -n $exe && -x $exe ]] || { echo "rxe-server-test: could not build the test" >&2; exit 1; }
exec scripts/rxe-vm.sh /usr/bin/env HIPOBJ_RXE_BIG="${HIPOBJ_RXE_BIG:-}" "$exe" --ignored --exact rdma_between_two_processes_on_rxe --test-threads=1 --nocapture "$@"
