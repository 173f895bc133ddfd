#!/usr/bin/env bash
# The RDMA rows of `hipobj bench` for two versions side by side, in one run:
# release builds of OLD_REV and of the working tree, then ROUNDS rounds that
# alternate old and new (each round a fresh server of that version on a
# fresh fs store, then that version's `hipobj bench --sizes 4KiB,64MiB`,
# one transfer at a time, every row RDMA and plain HTTP). Prints MiB/s per
# round and new/old over the sums (docs/performance.md).
#
#   scripts/bench-compare.sh OLD_REV [ROUNDS] [OUT_DIR]
#
# Defaults: 4 rounds, OUT_DIR /tmp/hipobj-bench-compare (each bench's JSON
# there). OLD_REV builds in OUT_DIR/old with a target directory of its own.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
old_rev=${1:?usage: scripts/bench-compare.sh OLD_REV [ROUNDS] [OUT_DIR]}
rounds=${2:-4}
out=${3:-/tmp/hipobj-bench-compare}
mkdir -p "$out"

cargo build -q --release -p hipobj-server -p hipobj-cli
new_bin="$(target_dir)/release"
if [[ ! -d $out/old ]]; then
    git worktree add -q --detach "$out/old" "$old_rev"
fi
(cd "$out/old" && git checkout -q --detach "$old_rev" &&
    CARGO_TARGET_DIR="$out/old-target" cargo build -q --release -p hipobj-server -p hipobj-cli)
old_bin="$out/old-target/release"

ulimit -n 20000
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
# The server's soft NIC takes a loopback address of its own: the client
# accepts it as one of the server's (the old client checks no address).
export HIPOBJ_ALLOW_PEER_GID=any
server=
trap '[[ -z $server ]] || stop_pids "$server"' EXIT

# run VERSION BIN ROUND: one server and one bench of that version.
run() {
    local v=$1 bin=$2 r=$3 dir="$out/$1-$3"
    mkdir -p "$dir"
    start_bench_server "$bin" "$dir"
    "$bin/hipobj" bench s3://bench/p --endpoint-url "http://$addr" --nic-hint softroce0 \
        --sizes 4KiB,64MiB --concurrency 1 --json >"$out/$v-$r.json" 2>"$dir/bench.err"
    stop_pids "$server"
    server=
}

for r in $(seq "$rounds"); do
    run old "$old_bin" "$r"
    run new "$new_bin" "$r"
    echo "round $r of $rounds done" >&2
done

python3 - "$out" "$rounds" "$old_rev" <<'PY'
import json, sys
out, rounds, old_rev = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rows(v, r):
    with open(f"{out}/{v}-{r}.json") as f:
        return {(x["size"], x["op"], x["mode"]): x["mib_per_s"] for x in json.load(f)["results"] if not x.get("skipped")}
old = [rows("old", r) for r in range(1, rounds + 1)]
new = [rows("new", r) for r in range(1, rounds + 1)]
print(f"| size | op | mode | old ({old_rev}) MiB/s by round | new MiB/s by round | new/old (sums) |")
print("|---|---|---|---|---|---|")
for key in sorted(old[0], key=lambda k: (k[2], k[0], k[1])):
    o = [x.get(key, 0.0) for x in old]
    n = [x.get(key, 0.0) for x in new]
    size = f"{key[0] >> 20} MiB" if key[0] >= 1 << 20 else f"{key[0] >> 10} KiB"
    ratio = sum(n) / sum(o) if sum(o) else float("nan")
    print(f"| {size} | {key[1]} | {key[2]} | {', '.join(f'{v:.1f}' for v in o)} | {', '.join(f'{v:.1f}' for v in n)} | {ratio:.2f} |")
PY
