#!/usr/bin/env bash
# Issue 29's figures in one run (docs/performance.md, "What each side's own
# threads pay"): the machine's calibration, the CPU per GiB and per
# transfer of the client's application threads and of the server's own
# threads (both soft NICs apart), at 1 and 256 transfers in flight, then
# five alternating single-transfer runs of 4 KiB and 64 MiB, RDMA and plain
# HTTP from the same release hipobj-server on the soft NIC.
#
#   scripts/bench-cpu.sh [OUT_DIR]      (default /tmp/hipobj-bench-cpu)
#
# HIPOBJ_BENCH_BIN=DIR runs the hipobj-server and hipobj in DIR instead of
# building the tree's (a "before" run of saved release binaries).
#
# Each bench's text (the rows and the goals' summary) goes to OUT_DIR/*.txt
# and its JSON to OUT_DIR/*.json.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
out=${1:-/tmp/hipobj-bench-cpu}
rm -rf "$out"
mkdir -p "$out"
if [[ -n ${HIPOBJ_BENCH_BIN:-} ]]; then
    bin=$HIPOBJ_BENCH_BIN
else
    cargo build --release -p hipobj-server -p hipobj-cli
    bin="$(target_dir)/release"
fi
ulimit -n 20000
server=
trap '[[ -z $server ]] || stop_pids "$server"' EXIT
start_bench_server "$bin" "$out"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
# The server's soft NIC takes a loopback address of its own, not the
# endpoint's: the client accepts it as one of the server's.
export HIPOBJ_ALLOW_PEER_GID=any
# A bench that fails (any transfer of a row failed) is named at the end and
# makes the script fail, after every other bench has run.
failed=()
bench() {
    local name=$1
    shift
    "$bin/hipobj" bench s3://bench/cpu/ --endpoint-url "http://$addr" \
        --nic-hint softroce0 --require-rdma --json-file "$out/$name.json" "$@" | tee "$out/$name.txt" ||
        failed+=("$name")
}
# The CPU per transfer at 1 and at 256 in flight, both drivers.
bench concurrency --calibrate --sizes 4KiB,1MiB --concurrency 1,256 --driver both --ops 512
# Single transfers, five runs (RDMA and HTTP alternate row by row).
for i in 1 2 3 4 5; do
    bench "single-$i" --sizes 4KiB,64MiB --concurrency 1
done
if ((${#failed[@]})); then
    echo "bench-cpu: failed: ${failed[*]} (see $out)" >&2
    exit 1
fi
