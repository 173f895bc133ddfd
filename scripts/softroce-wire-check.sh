#!/usr/bin/env bash
# The soft NIC judged on the real wire: captures the loopback interface
# (dumpcap, or tcpdump) while `hipobj demo` PUTs and GETs an object over the
# soft RoCE NIC, then checks every RoCEv2 packet of the capture with
# implementations this project did not write:
#
#   - scapy's RoCE layer recomputes the ICRC of every packet over the IPv4,
#     UDP and BTH headers as captured (scripts/roce-icrc-check.py); every
#     one must verify, and there must be packets;
#   - tshark decodes the capture as RoCEv2 with no malformed frame.
#
# The demo runs once per link in $HIPOBJ_WIRE_LINKS (default "udp raw":
# the UDP-socket link, and the raw IPv4 socket link, which needs
# CAP_NET_RAW). Object size $HIPOBJ_WIRE_SIZE (default 4MiB).
#
# Usage: scripts/softroce-wire-check.sh [OUT_DIR]   (default: target/softroce-wire)
# Needs root for the capture (and to apt-get install tshark if missing),
# python3-venv (scapy goes into $HIPOBJ_SCAPY_VENV, default /tmp/hipobj-scapy-venv).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
out="${1:-target/softroce-wire}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
venv="${HIPOBJ_SCAPY_VENV:-/tmp/hipobj-scapy-venv}"
size="${HIPOBJ_WIRE_SIZE:-4MiB}"
links="${HIPOBJ_WIRE_LINKS:-udp raw}"

if ! command -v dumpcap >/dev/null && ! command -v tcpdump >/dev/null || ! command -v tshark >/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "tshark/dumpcap missing: apt-get install tshark" >&2; exit 1; }
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -qq && apt-get install -y -qq tshark >/dev/null
fi
if ! "$venv/bin/python" -c 'import scapy.contrib.roce' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q scapy
fi

bin="$(build_workspace)/hipobj"

cap_pid=
cleanup() { [ -z "$cap_pid" ] || { kill -INT "$cap_pid" 2>/dev/null || true; wait "$cap_pid" 2>/dev/null || true; }; }
trap cleanup EXIT

fail=0
for link in $links; do
    pcap="$out/demo-$link.pcap"
    rm -f "$pcap"
    if command -v dumpcap >/dev/null; then
        dumpcap -q -i lo -P -s 0 -B 64 -f 'udp port 4791' -w "$pcap" 2>"$out/capture-$link.err" &
    else
        tcpdump -i lo -s 0 -B 65536 -U -w "$pcap" 'udp port 4791' 2>"$out/capture-$link.err" &
    fi
    cap_pid=$!
    # The capture has started once its file header is written.
    for _ in $(seq 100); do [ -s "$pcap" ] && break; sleep 0.1; done
    [ -s "$pcap" ] || { echo "FAIL: the capture did not start: $(cat "$out/capture-$link.err")" >&2; exit 1; }
    sleep 0.5
    echo "== hipobj demo --size $size --rounds 1 on the $link link, capturing lo into $pcap"
    if ! HIPOBJ_SOFTROCE_LINK=$link "$bin" demo --size "$size" --rounds 1 >"$out/demo-$link.out" 2>&1; then
        cat "$out/demo-$link.out" >&2
        echo "FAIL: the demo failed on the $link link" >&2
        fail=1
    fi
    tail -1 "$out/demo-$link.out"
    sleep 0.5
    kill -INT "$cap_pid"
    wait "$cap_pid" || true
    cap_pid=
    "$venv/bin/python" scripts/roce-icrc-check.py --min 100 "$pcap" || fail=1
    malformed=$(tshark -r "$pcap" -d udp.port==4791,infiniband -Y '_ws.malformed || !infiniband' -T fields -e frame.number 2>/dev/null | wc -l)
    echo "tshark: $malformed frames malformed or not decoded as RoCE"
    [ "$malformed" = 0 ] || fail=1
done

if [ "$fail" = 0 ]; then
    echo "PASS: every RoCE packet on the wire carries a right ICRC (scapy) and decodes (tshark)"
else
    echo "FAIL: see above; captures kept in $out" >&2
fi
exit "$fail"
