#!/usr/bin/env bash
# What block checksums cost (docs/performance.md, "Block checksums"):
# 64 MiB PUT and GET, by RDMA on the soft NIC and by plain HTTP, against the
# release hipobj-server of two builds side by side, five alternating rounds
# in one run, each from its own fresh data directory.
#
#   scripts/bench-checksums.sh BEFORE_BIN_DIR AFTER_BIN_DIR [OUT_DIR]
#
# Each BIN_DIR holds a release hipobj-server and hipobj. Rows and JSON go to
# OUT_DIR (default /tmp/hipobj-bench-checksums).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
before=$1 after=$2 out=${3:-/tmp/hipobj-bench-checksums}
rm -rf "$out" && mkdir -p "$out"
ulimit -n 20000
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
export HIPOBJ_ALLOW_PEER_GID=any
server=
trap '[[ -z $server ]] || stop_pids "$server"' EXIT
for round in 1 2 3 4 5; do
    for side in before after; do
        bin=${!side}
        start_bench_server "$bin" "$out/$side-$round"
        "$bin/hipobj" bench s3://bench/sums/ --endpoint-url "http://$addr" --nic-hint softroce0 \
            --require-rdma --sizes 64MiB --concurrency 1 --driver threads --ops 8 \
            --json-file "$out/$side-$round.json" >"$out/$side-$round.txt"
        echo "== $side, round $round"
        cat "$out/$side-$round.txt"
        stop_pids "$server"
        server=
    done
done
