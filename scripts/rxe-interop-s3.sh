#!/bin/sh
# Runs inside the rxe VM, from the job scripts/rxe-interop-test.sh writes,
# once the veth pair, the namespace "soft" and rxe1 exist: hipobj-server and
# the hipobj CLI across the two RDMA implementations, both ways.
#
#   1. hipobj-server on rxe1 (10.77.0.1, libibverbs), the hipobj client on
#      the soft NIC's raw link in the namespace (10.77.0.2);
#   2. hipobj-server on the soft NIC in the namespace, the client on rxe1.
#
# Each way: a PUT and a GET of one object with --require-rdma (no HTTP
# fallback), the bytes compared with cmp, then the server's RDMA counters
# (GET /.hipobj/metrics), which must show the PUT and the GET with their
# bytes. Every line meant for a report starts with "s3-interop:".
#
#   rxe-interop-s3.sh HIPOBJ HIPOBJ-SERVER
set -u
cli=$1
server=$2
work=/run/scratch/s3
mkdir -p "$work"
export AWS_ACCESS_KEY_ID=AKINTEROP AWS_SECRET_ACCESS_KEY=interop-secret AWS_REGION=us-east-1
# The soft NIC as the rxe interop test has it: raw link, the namespace's
# address, MTU 1024 (what rxe gets on the veth's 1500 bytes).
soft_env="HIPOBJ_SOFTROCE_LINK=raw HIPOBJ_SOFTROCE_ADDR=10.77.0.2 HIPOBJ_SOFTROCE_MTU=1024"
# An object of 256 KiB + 4099 bytes (261 packets at MTU 1024, kept small:
# the VM is emulated and both binaries are debug builds): distinct lines, so
# a misplaced chunk shows in cmp, that compress, since the capture of the
# transfers goes back through the VM's console.
seq -f '%09g hipobj over rxe and the soft NIC' 1 7000 | head -c 266243 >"$work/object"
size=$(wc -c <"$work/object")
fail=0

# start_server NAME NETNS-PREFIX ADDRESS DEVICE: starts hipobj-server,
# waits for its "listening on" line, sets $endpoint and $server_pid.
start_server() {
    name=$1 prefix=$2 address=$3 device=$4
    rm -rf "$work/data-$name" && mkdir -p "$work/data-$name"
    senv=; [ "$device" = softroce0 ] && senv=$soft_env
    # shellcheck disable=SC2086
    $prefix env HIPOBJ_LOG=warn $senv "$server" --address "$address:0" --data-dir "$work/data-$name" \
        --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" \
        --rdma-device "$device" >"$work/$name.out" 2>"$work/$name.err" &
    server_pid=$!
    i=0
    while [ $i -lt 600 ] && ! grep -q '^listening on' "$work/$name.out" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    endpoint=http://$(sed -n 's/^listening on //p' "$work/$name.out")
    echo "s3-interop: $name: hipobj-server on $device listening at $endpoint"
}

# one_way NAME SERVER-NETNS SERVER-ADDR SERVER-DEVICE CLIENT-NETNS CLIENT-DEVICE
one_way() {
    name=$1 sprefix=$2 saddr=$3 sdev=$4 cprefix=$5 cdev=$6
    start_server "$name" "$sprefix" "$saddr" "$sdev"
    cenv=; [ "$cdev" = softroce0 ] && cenv=$soft_env
    # shellcheck disable=SC2086
    $cprefix curl -sS -o /dev/null -w "s3-interop: $name: CreateBucket HTTP %{http_code}\n" \
        --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT "$endpoint/interop"
    rm -f "$work/back-$name"
    # shellcheck disable=SC2086
    if timeout 300 $cprefix env $cenv "$cli" put "$work/object" "s3://interop/$name" \
        --endpoint-url "$endpoint" --nic-hint "$cdev" --require-rdma; then
        echo "s3-interop: $name: PUT of $size bytes from the client on $cdev: ok"
    else
        echo "s3-interop: $name: PUT from the client on $cdev FAILED"
        fail=1
    fi
    # shellcheck disable=SC2086
    if timeout 300 $cprefix env $cenv "$cli" get "s3://interop/$name" "$work/back-$name" \
        --endpoint-url "$endpoint" --nic-hint "$cdev" --require-rdma &&
        cmp "$work/object" "$work/back-$name"; then
        echo "s3-interop: $name: GET into the client on $cdev: $(wc -c <"$work/back-$name") bytes, identical to what was PUT"
    else
        echo "s3-interop: $name: GET into the client on $cdev FAILED or differs"
        fail=1
    fi
    # The server's counters, as it reports them.
    # shellcheck disable=SC2086
    $cprefix curl -sS "$endpoint/.hipobj/metrics" >"$work/$name.metrics"
    grep -E '^hipobj_rdma_(gets|puts|bytes_written|bytes_read|errors|declines)_total ' "$work/$name.metrics" |
        sed "s/^/s3-interop: $name: server /"
    gets=$(sed -n 's/^hipobj_rdma_gets_total //p' "$work/$name.metrics")
    puts=$(sed -n 's/^hipobj_rdma_puts_total //p' "$work/$name.metrics")
    written=$(sed -n 's/^hipobj_rdma_bytes_written_total //p' "$work/$name.metrics")
    read=$(sed -n 's/^hipobj_rdma_bytes_read_total //p' "$work/$name.metrics")
    if [ "$gets" = 1 ] && [ "$puts" = 1 ] && [ "$written" = "$size" ] && [ "$read" = "$size" ]; then
        echo "s3-interop: $name: the server moved both objects over RDMA"
    else
        echo "s3-interop: $name: the server's counters do not show one RDMA PUT and one RDMA GET of $size bytes"
        fail=1
    fi
    kill -TERM "$server_pid"
    wait "$server_pid"
    echo "s3-interop: $name: server exit status $?"
    grep -E 'WARN|ERROR' "$work/$name.err" | tail -5
}

one_way soft-client-rxe-server "" 10.77.0.1 rxe1 "ip netns exec soft" softroce0
one_way rxe-client-soft-server "ip netns exec soft" 10.77.0.2 softroce0 "" rxe1
[ $fail = 0 ] && echo "s3-interop: PASS both ways" || echo "s3-interop: FAIL"
exit $fail
