# What the scripts share. Source it from a script: `. "$(dirname "$0")/lib.sh"`.
# It changes into the repository root and sets $root.
#
# Every lane builds the debug workspace the way `cargo test --workspace
# --all-targets` does: one command, one set of features for every
# dependency. A `cargo build -p CRATE` resolves features for that crate
# alone, and for hipobj-server or hipobj-cli that compiles about 60
# dependencies a second (or third) time, minutes each on 2 cores.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# The target directory (CARGO_TARGET_DIR or the workspace's).
target_dir() {
    cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4
}

# Builds every target of the workspace in the test suite's configuration;
# prints the directory that holds the debug binaries.
build_workspace() {
    cargo build -q --workspace --all-targets >&2
    echo "$(target_dir)/debug"
}

# Prints the executable of integration test NAME of crate DIR (its folder
# under crates/), built in the test suite's configuration.
test_exe() {
    cargo test -q --workspace --test "$2" --no-run --message-format=json |
        grep "\"src_path\":\"[^\"]*/$1/tests/$2.rs\"" | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4
}

# Prints the hipobj-rc-v2 peers' source directory: $HIPOBJ_PEERS_DIR, or
# ../shared/peers/hipobj-rc-v2 beside the checkout, or the one under
# /work/shared. Prints nothing when there is none.
peers_dir() {
    local d
    for d in "${HIPOBJ_PEERS_DIR:-}" "$root/../shared/peers/hipobj-rc-v2" /work/shared/peers/hipobj-rc-v2; do
        if [[ -n $d && -x $d/build.sh ]]; then
            (cd "$d" && pwd)
            return
        fi
    done
}

# Runs the ignored test TEST of integration test NAME of crate DIR, from the
# crate's folder as `cargo test` would, with the remaining arguments for the
# test binary; fails unless exactly that one test ran and passed (an --exact
# filter that matches nothing would otherwise pass).
run_ignored_test() {
    local exe out rc=0
    exe=$(test_exe "$1" "$2")
    [[ -n $exe && -x $exe ]] || { echo "could not build $1's test $2" >&2; return 1; }
    out=$(cd "$root/crates/$1" && "$exe" --ignored --exact "$3" "${@:4}" 2>&1) || rc=$?
    printf '%s\n' "$out"
    [[ $rc == 0 ]] || return "$rc"
    grep -q '^test result: ok\. 1 passed' <<<"$out" || { echo "$1 $2: $3 did not run" >&2; return 1; }
}

# Stops the background processes whose pids are given, the last started
# first (a SeaweedFS filer or S3 API before the master it talks to), and
# reaps them. One that is still running 10 s after SIGTERM gets SIGKILL: a
# SeaweedFS filer whose master is gone can wait for it for ever, and with it
# the script and CI.
stop_pids() {
    local i p alive
    for ((i = $# ; i >= 1; i--)); do kill "${!i}" 2>/dev/null || true; done
    for _ in $(seq 100); do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [[ $alive == 0 ]] && break
        sleep 0.1
    done
    for p in "$@"; do
        if kill -0 "$p" 2>/dev/null; then
            echo "pid $p still running 10 s after SIGTERM: SIGKILL" >&2
            kill -KILL "$p" 2>/dev/null || true
        fi
        wait "$p" 2>/dev/null || true
    done
}

# Starts BIN_DIR/hipobj-server for the benchmarks in DIR: a fresh fs store
# under DIR/data (bucket `bench`), keys bench / bench-secret, no fsync, RDMA
# on the soft NIC. Sets $server (its pid) and $addr (host:port); fails
# naming DIR/server.err if it does not come up within 10 s.
start_bench_server() {
    local bin=$1 dir=$2
    rm -rf "$dir/data" && mkdir -p "$dir/data/bench"
    cat >"$dir/server.toml" <<T
address = "127.0.0.1:0"
metrics_log_secs = 0
[[credentials]]
access_key = "bench"
secret_key = "bench-secret"
[storage]
kind = "fs"
data_dir = "$dir/data"
[access]
# One key, and the bucket made on disk by hand: no owner records.
bucket_owners = false
[limits]
fsync = false
# The benches keep up to 256 transfers in flight from this one address:
# the default share (64) would close or refuse the rest (docs/server.md,
# "Limits").
[http]
max_connections_per_address = 1024
[rdma]
enabled = true
device = "softroce0"
backend = "softroce"
T
    "$bin/hipobj-server" --config "$dir/server.toml" >"$dir/server.out" 2>"$dir/server.err" &
    server=$!
    for _ in $(seq 100); do
        grep -q "listening on" "$dir/server.out" 2>/dev/null && break
        sleep 0.1
    done
    addr=$(sed -n 's/^listening on //p' "$dir/server.out")
    [[ -n $addr ]] || { cat "$dir/server.err" >&2; echo "hipobj-server ($bin) did not start; see $dir/server.err" >&2; return 1; }
}
