#!/usr/bin/env bash
# Issue 41's rxe measurement, by hand (not a CI lane): in the rxe VM
# (scripts/rxe-vm.sh), hipobj-server on rxe0 (libibverbs) and the hipobj
# CLI on the same rxe0, one object of SIZE bytes (default 32 MiB) PUT once,
# then GET with --parallel 1, 2 and 4 (parts of SIZE/4), ROUNDS times each
# (default 2), interleaved. For each GET: wall time, the bytes compared with
# cmp, and the server's own counters (RDMA GETs and bytes WRITTEN, from
# /.hipobj/metrics), which must add up to the object with no decline.
# Prints a table ("rxe-parts:" lines) and "RXE-PARTS: PASS" or FAIL.
#
#   scripts/rxe-parts.sh [SIZE_MIB] [ROUNDS]
#
# The VM is emulated (TCG) on this machine's cores and the binaries are the
# debug build: the times say what in-flight parts do under that bound, not
# what rxe or a NIC can do.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
size_mib=${1:-32}
rounds=${2:-2}
bin=$(build_workspace)
inner=$(mktemp /tmp/rxe-parts.XXXXXX.sh)
trap 'rm -f "$inner"' EXIT
cat >"$inner" <<EOS
set -u
H=$bin/hipobj S=$bin/hipobj-server SIZE_MIB=$size_mib ROUNDS=$rounds
EOS
cat >>"$inner" <<'EOS'
W=/run/scratch/parts
mkdir -p $W/data
export AWS_ACCESS_KEY_ID=AKPARTS AWS_SECRET_ACCESS_KEY=parts-secret AWS_REGION=us-east-1
HIPOBJ_LOG=warn $S --address 192.0.2.1:0 --data-dir $W/data --access-key $AWS_ACCESS_KEY_ID \
    --secret-key $AWS_SECRET_ACCESS_KEY --rdma-device rxe0 >$W/server.out 2>$W/server.err &
for _ in $(seq 600); do grep -q '^listening on' $W/server.out 2>/dev/null && break; sleep 0.1; done
ep=http://$(sed -n 's/^listening on //p' $W/server.out)
curl -sS -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT "$ep/parts"
head -c $((SIZE_MIB << 20)) /dev/urandom >$W/object
size=$(wc -c <$W/object)
part=$((size / 4))
c() { curl -s "$ep/.hipobj/metrics" | awk -v n="$1" '$1 == n { printf "%.0f\n", $2 }'; }
rdma="--endpoint-url $ep --nic-hint rxe0 --require-rdma"
fail=0
# The CLI's stderr (its progress line: the VM's console is a terminal)
# goes to a file, shown when a command fails.
if ! $H put $W/object s3://parts/obj $rdma 2>$W/cli.err; then echo "rxe-parts: PUT FAILED"; cat $W/cli.err; fail=1; fi
echo "rxe-parts: | in flight | round | GET s | MiB/s | server RDMA GETs | bytes written |"
for r in $(seq $ROUNDS); do
    for n in 1 2 4; do
        g0=$(c hipobj_rdma_gets_total) w0=$(c hipobj_rdma_bytes_written_total) d0=$(c hipobj_rdma_declines_total)
        rm -f $W/back
        t0=$(date +%s.%N)
        if $H get $rdma --part-size $part --parallel $n s3://parts/obj $W/back 2>$W/cli.err && cmp -s $W/object $W/back; then
            t1=$(date +%s.%N)
            g=$(( $(c hipobj_rdma_gets_total) - g0 )) w=$(( $(c hipobj_rdma_bytes_written_total) - w0 ))
            s=$(echo "$t1 - $t0" | bc)
            echo "rxe-parts: | $n | $r | $s | $(echo "scale=1; $SIZE_MIB / $s" | bc) | $g | $w |"
            [ "$w" -eq "$size" ] || { echo "rxe-parts: $n in flight: $w bytes by RDMA, not $size"; fail=1; }
            [ "$(c hipobj_rdma_declines_total)" -eq "$d0" ] || { echo "rxe-parts: a decline"; fail=1; }
        else
            echo "rxe-parts: GET at $n in flight FAILED or differs"; cat $W/cli.err; fail=1
        fi
    done
done
kill %1 2>/dev/null
[ $fail -eq 0 ] && echo "RXE-PARTS: PASS" || echo "RXE-PARTS: FAIL"
exit $fail
EOS
exec scripts/rxe-vm.sh /bin/sh "$inner"
