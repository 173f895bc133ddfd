#!/usr/bin/env bash
# Issue 41's must-show, by hand (not a CI lane: it moves 16 GiB over the
# soft NIC): one object of SIZE bytes (default 4 GiB, the most one
# registration holds) PUT and GET by the hipobj CLI and by Python's
# hipobj.S3 against hipobj-server with a 64 MiB transfer cap on the soft
# NIC. Checks, for each client: the command succeeded with RDMA required,
# the bytes came back exact (sha256), and the server's counters moved the
# whole object by RDMA (bytes READ for the PUT, WRITTEN for the GET) with
# no decline. Prints each client's times and the counters.
#
#   scripts/large-object-check.sh [SIZE]
#
# Env: HIPOBJ_PY_VENV (default /tmp/hipobj-py-venv, with the wheel
# installed, as scripts/python-test.sh leaves it), WORK (default a new
# folder under /var/tmp: it needs 4 x SIZE of disk).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

size=${1:-$((4 << 30))}
cap=$((64 << 20))
py=${HIPOBJ_PY_VENV:-/tmp/hipobj-py-venv}/bin/python
bin=$(build_workspace)
work=${WORK:-$(mktemp -d /var/tmp/hipobj-large.XXXXXX)}
ak=large-ak sk=large-secret
server_pid=
cleanup() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/data"
HIPOBJ_LOG=warn "$bin/hipobj-server" --address 127.0.0.1:0 --data-dir "$work/data" \
    --access-key "$ak" --secret-key "$sk" --rdma-device softroce0 \
    --max-transfer "$cap" --max-object-size $((size + 1)) >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
for _ in $(seq 100); do grep -q '^listening on ' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
endpoint="http://$(sed -n 's/^listening on //p' "$work/server.out")"
export AWS_ACCESS_KEY_ID=$ak AWS_SECRET_ACCESS_KEY=$sk AWS_REGION=us-east-1 HIPOBJ_ALLOW_PEER_GID=any

counter() { curl -s "$endpoint/.hipobj/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
failed=0
check() { if "${@:2}"; then echo "PASS $1"; else echo "FAIL $1"; failed=1; fi; }
moved() { # WHAT COUNTER BEFORE
    local now; now=$(counter "$2")
    check "$1: $(( now - $3 )) bytes by RDMA ($2), $size expected" test $(( now - $3 )) -eq "$size"
}

"$py" -c 'import boto3, sys; boto3.client("s3", endpoint_url=sys.argv[1]).create_bucket(Bucket="big")' "$endpoint"
head -c "$size" /dev/urandom >"$work/in"
want=$(sha256sum <"$work/in" | cut -d' ' -f1)
rdma=(--endpoint-url "$endpoint" --nic-hint softroce0 --require-rdma)

declines=$(counter hipobj_rdma_declines_total)
r=$(counter hipobj_rdma_bytes_read_total); t0=$(date +%s.%N)
"$bin/hipobj" put "${rdma[@]}" "$work/in" s3://big/cli
echo "CLI put: $(echo "$(date +%s.%N) - $t0" | bc) s"
moved "CLI put" hipobj_rdma_bytes_read_total "$r"
w=$(counter hipobj_rdma_bytes_written_total); t0=$(date +%s.%N)
"$bin/hipobj" get "${rdma[@]}" s3://big/cli "$work/out"
echo "CLI get: $(echo "$(date +%s.%N) - $t0" | bc) s"
moved "CLI get" hipobj_rdma_bytes_written_total "$w"
check "CLI get: the bytes are the input's" test "$(sha256sum <"$work/out" | cut -d' ' -f1)" = "$want"
rm -f "$work/out"
# Room for Python's upload (its parts, then the object they make).
"$py" -c 'import boto3, sys; boto3.client("s3", endpoint_url=sys.argv[1]).delete_object(Bucket="big", Key="cli")' "$endpoint"

r=$(counter hipobj_rdma_bytes_read_total); w=$(counter hipobj_rdma_bytes_written_total)
"$py" - "$endpoint" "$ak" "$sk" "$work/in" "$want" <<'PY'
import hashlib, sys, time
import numpy as np
import hipobj
endpoint, ak, sk, path, want = sys.argv[1:]
data = np.fromfile(path, dtype=np.uint8)
client = hipobj.Client(nic_hint="softroce0")
s3 = hipobj.S3(client, endpoint, ak, sk, fallback=False)
t0 = time.monotonic()
assert s3.put_from(data, "big", "py") == data.nbytes
print(f"Python put_from: {time.monotonic() - t0:.1f} s, rdma={s3.last['rdma']}")
out = np.zeros_like(data)
t0 = time.monotonic()
assert s3.get_into(out, "big", "py") == data.nbytes
print(f"Python get_into: {time.monotonic() - t0:.1f} s, rdma={s3.last['rdma']}")
got = hashlib.sha256(out.data).hexdigest()
print("PASS Python: the bytes are the input's" if got == want else "FAIL Python: the bytes differ")
sys.exit(0 if got == want else 1)
PY
[[ $? -eq 0 ]] || failed=1
moved "Python put_from" hipobj_rdma_bytes_read_total "$r"
moved "Python get_into" hipobj_rdma_bytes_written_total "$w"
check "no request declined RDMA" test "$(counter hipobj_rdma_declines_total)" -eq "$declines"
echo "server: puts=$(counter hipobj_rdma_puts_total) gets=$(counter hipobj_rdma_gets_total)"
[[ $failed -eq 0 ]] && echo "LARGE-OBJECT: PASS ($size bytes)" || { echo "LARGE-OBJECT: FAIL"; exit 1; }
