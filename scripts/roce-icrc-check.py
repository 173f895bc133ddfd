#!/usr/bin/env python3
"""Checks the ICRC of every RoCEv2 packet in a capture with scapy's RoCE
layer (scapy.contrib.roce), an implementation this project did not write.

    roce-icrc-check.py CAPTURE.pcap [--min N]

A RoCEv2 packet is an IPv4 datagram to UDP port 4791. For each one the
script asks scapy's BTH layer for the ICRC it computes over the IPv4, UDP
and BTH headers as they were captured (scapy masks TOS, TTL, checksums and
the BTH reserved byte itself) and compares it with the last four bytes of
the packet. It prints how many packets it saw, how many verified and how
many were wrong, and exits 1 on any wrong packet or when fewer than N
(default 1) RoCE packets were seen.
"""
import argparse
import sys

from scapy.all import IP, UDP, PcapReader, raw  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--min", type=int, default=1, help="fail below this many RoCE packets")
    ap.add_argument("--show", type=int, default=5, help="wrong packets to print")
    args = ap.parse_args()
    seen = ok = wrong = 0
    ids = set()
    with PcapReader(args.pcap) as r:
        for n, pkt in enumerate(r, 1):
            if IP not in pkt or UDP not in pkt or pkt[UDP].dport != 4791:
                continue
            seen += 1
            if BTH not in pkt:
                wrong += 1
                print(f"packet {n}: UDP 4791 but no BTH", file=sys.stderr)
                continue
            bth = pkt[BTH]
            on_wire = raw(pkt[UDP].payload)[-4:]
            want = bth.compute_icrc(None)
            ids.add(pkt[IP].id)
            if want == on_wire:
                ok += 1
            else:
                wrong += 1
                if wrong <= args.show:
                    print(
                        f"packet {n}: {pkt[IP].src} -> {pkt[IP].dst} id {pkt[IP].id:#06x} "
                        f"opcode {bth.opcode} psn {bth.psn}: ICRC on the wire {on_wire.hex()}, "
                        f"scapy computes {want.hex()}",
                        file=sys.stderr,
                    )
    shown = sorted(ids)[:4]
    print(
        f"{seen} RoCE packets, {ok} verified, {wrong} wrong "
        f"(scapy {__import__('scapy').__version__}; IP identifications seen: {len(ids)} distinct, e.g. {shown})"
    )
    if seen < args.min:
        print(f"FAIL: fewer than {args.min} RoCE packets in {args.pcap}", file=sys.stderr)
        return 1
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
