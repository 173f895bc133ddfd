#!/usr/bin/env bash
# hipobj-server's RDMA data path on a real verbs device: builds the server
# binary and crates/hipobj-server/tests/rdma_rxe.rs, then runs the test in
# the rxe VM (scripts/rxe-vm.sh), where it starts the server as a second
# process on rxe0 and drives it with the hipobj library over aws-sdk-s3.
# Extra arguments go to the test binary. HIPOBJ_RXE_BIG sets the size of
# the large object (default 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p hipobj-server --bin hipobj-server
exe=$(cargo test -p hipobj-server --test rdma_two_process --no-run --message-format=json |
    grep '"name":"rdma_two_process"' | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
[[ -n $exe && -x $exe ]] || { echo "rxe-server-test: could not build the test" >&2; exit 1; }
exec scripts/rxe-vm.sh /usr/bin/env HIPOBJ_RXE_BIG="${HIPOBJ_RXE_BIG:-}" "$exe" --ignored --exact rdma_between_two_processes_on_rxe --test-threads=1 --nocapture "$@"
