#!/usr/bin/env bash
# The soft NIC against the Linux kernel's rxe, in the rxe VM
# (scripts/rxe-vm.sh): the VM's root namespace holds rxe1 on veth-rxe
# (10.77.0.1), a network namespace "soft" holds the other end of the veth
# pair (10.77.0.2), where the soft NIC runs on its raw link.
# crates/hipobj-softroce/tests/rxe_interop.rs then moves RDMA WRITE, READ,
# SEND and WRITE with immediate both ways with every byte checked; rxe
# checks the soft NIC's ICRCs and the soft NIC checks rxe's; then the same
# again with netem dropping 5 % of the packets each way on the veth. Then
# scripts/rxe-interop-s3.sh runs hipobj-server on one side and the hipobj
# CLI on the other, both ways (a PUT and a GET each, bytes compared, the
# server's RDMA counters shown); its lines start with "s3-interop:".
#
# dumpcap records the veth inside the VM; the capture comes back through
# the console into target/rxe-interop/veth.pcap, where scapy's RoCE layer
# (scripts/roce-icrc-check.py) checks the ICRC of every packet, rxe's and
# the soft NIC's. Exit status: the test's, or the check's.
#
#   scripts/rxe-interop-test.sh [TEST-ARGS...]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
out=target/rxe-interop
mkdir -p "$out"
venv="${HIPOBJ_SCAPY_VENV:-/tmp/hipobj-scapy-venv}"
exe=$(test_exe hipobj-softroce rxe_interop)
[[ -n $exe && -x $exe ]] || { echo "rxe-interop-test: could not build the test" >&2; exit 1; }
bin=$(build_workspace)

# The job inside the VM (a file under target/, which the VM sees read-only).
job=$PWD/$out/job.sh
cat >"$job" <<JOB
set -u
ip link add veth-rxe type veth peer name veth-soft
ip netns add soft
ip link set veth-soft netns soft
ip addr add 10.77.0.1/24 dev veth-rxe
ip link set veth-rxe up
ip netns exec soft ip link set lo up
ip netns exec soft ip addr add 10.77.0.2/24 dev veth-soft
ip netns exec soft ip link set veth-soft up
rdma link add rxe1 type rxe netdev veth-rxe
rdma link show
dumpcap -q -i veth-rxe -P -s 0 -f 'udp port 4791' -w /run/scratch/veth.pcap 2>/run/scratch/dumpcap.err &
cap=\$!
for i in \$(seq 50); do [ -s /run/scratch/veth.pcap ] && break; sleep 0.2; done
HIPOBJ_RXE_DEVICE=rxe1 timeout 300 $exe --ignored --exact soft_nic_and_rxe_interoperate --nocapture --test-threads=1 $*
rc=\$?
# Again with netem dropping 5 % of the packets each way on the veth: the
# soft NIC places rxe's WRITE packets and READ responses that follow a loss
# and asks rxe again for the gaps; rxe recovers by go-back-N against it.
echo "interop under loss: netem drops 5 % of the packets each way"
tc qdisc add dev veth-rxe root netem loss 5% || rc=1
ip netns exec soft tc qdisc add dev veth-soft root netem loss 5% || rc=1
HIPOBJ_RXE_DEVICE=rxe1 timeout 300 $exe --ignored --exact soft_nic_and_rxe_interoperate --nocapture --test-threads=1 $* || rc=1
tc -s qdisc show dev veth-rxe
ip netns exec soft tc -s qdisc show dev veth-soft
tc qdisc del dev veth-rxe root
ip netns exec soft tc qdisc del dev veth-soft root
echo "rxe1 counters after the lossy run:"; for f in /sys/class/infiniband/rxe1/ports/1/hw_counters/*; do printf '  %s=%s\n' "\$(basename \$f)" "\$(cat \$f)"; done
sh $PWD/scripts/rxe-interop-s3.sh $bin/hipobj $bin/hipobj-server || rc=1
sleep 1
kill -INT \$cap; wait \$cap
cat /run/scratch/dumpcap.err
# Where a packet could be lost between the wire and the soft NIC: the veth
# end in the namespace, and the raw socket's drop count (last column).
ip netns exec soft ip -s link show veth-soft
ip netns exec soft cat /proc/net/raw
echo "rxe1 counters:"; for f in /sys/class/infiniband/rxe1/ports/1/hw_counters/*; do printf '  %s=%s\n' "\$(basename \$f)" "\$(cat \$f)"; done
echo "@@PCAP-BEGIN"; gzip -c /run/scratch/veth.pcap | base64; echo "@@PCAP-END"
exit \$rc
JOB

set +e
RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-600} scripts/rxe-vm.sh /bin/sh "$job" >"$out/console.txt" 2>&1
rc=$?
set -e
# The console minus the capture.
sed '/@@PCAP-BEGIN/,/@@PCAP-END/d' "$out/console.txt" | grep -v '^\s*$' | tail -100
sed -n '/@@PCAP-BEGIN/,/@@PCAP-END/p' "$out/console.txt" | sed '1d;$d' | tr -d '\r' | base64 -d | gunzip >"$out/veth.pcap" || true
if [ -s "$out/veth.pcap" ]; then
    if ! "$venv/bin/python" -c 'import scapy.contrib.roce' 2>/dev/null; then
        python3 -m venv "$venv" && "$venv/bin/pip" install -q scapy
    fi
    echo "scapy on the veth capture ($out/veth.pcap):"
    "$venv/bin/python" scripts/roce-icrc-check.py --min 100 "$out/veth.pcap" || rc=1
else
    echo "rxe-interop-test: no capture came back" >&2
    rc=1
fi
[ "$rc" = 0 ] && echo "PASS: the soft NIC and the kernel's rxe interoperate" || echo "FAIL (rc $rc); console in $out/console.txt" >&2
exit "$rc"
