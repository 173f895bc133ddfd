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

UDP GSO super-packets. The soft NIC's UDP link sends runs of one QP's
consecutive equal-size packets as one UDP GSO send; on loopback the
kernel never cuts it (lo takes GSO packets whole), so a capture of lo
holds one IPv4 packet of up to 64 KiB carrying the RoCE packets back to
back, under identification 0. The receiving kernel cuts it into segments
of the GSO size, the last one possibly shorter, and gives segment k the
identification 0 + k, the IPv4 and UDP lengths of the segment and fresh
checksums (Linux inet_gso_segment / __udp_gso_segment; on a veth without
UDP segmentation offload a capture shows exactly that). A packet whose
ICRC fails as a whole is therefore tried as such a super-packet: the
segment size is the first multiple of 4 at which a BTH to the same QP with
the next PSN begins and at which the first segment's ICRC (computed by
scapy) verifies; then every segment is rebuilt with the header the kernel
gives it and scapy checks its ICRC like any other packet. The split is
this script's model of the kernel; the ICRCs are scapy's.
"""
import argparse
import sys

from scapy.all import IP, UDP, PcapReader, raw  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402


def segment(pkt, data, size, k):
    """Segment k (its bytes `data`) of the super-packet `pkt` cut at `size`,
    as a scapy IP packet with the header the kernel gives it."""
    ip = bytearray(raw(pkt[IP])[:20])
    udp = bytearray(raw(pkt[UDP])[:8])
    ip[2:4] = (28 + len(data)).to_bytes(2, "big")
    ip[4:6] = ((pkt[IP].id + k) & 0xFFFF).to_bytes(2, "big")
    udp[4:6] = (8 + len(data)).to_bytes(2, "big")
    return IP(bytes(ip) + bytes(udp) + data)


def icrc_ok(p):
    return BTH in p and p[BTH].compute_icrc(None) == raw(p[UDP].payload)[-4:]


def split_gso(pkt):
    """The segments of a GSO super-packet seen whole, or None."""
    payload = raw(pkt[UDP].payload)
    if len(payload) < 24:
        return None
    qp, psn = payload[5:8], int.from_bytes(payload[9:12], "big")
    nxt = ((psn + 1) & 0xFFFFFF).to_bytes(3, "big")
    for size in range(16, min(len(payload) - 1, 4200) + 1, 4):
        b = payload[size : size + 12]
        if len(b) < 12 or b[5:8] != qp or b[9:12] != nxt:
            continue
        if icrc_ok(segment(pkt, payload[:size], size, 0)):
            return [segment(pkt, payload[at : at + size], size, k) for k, at in enumerate(range(0, len(payload), size))]
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--min", type=int, default=1, help="fail below this many RoCE packets")
    ap.add_argument("--show", type=int, default=5, help="wrong packets to print")
    args = ap.parse_args()
    seen = ok = wrong = supers = 0
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
            elif (segs := split_gso(pkt)) is not None:
                supers += 1
                seen += len(segs) - 1
                for k, seg in enumerate(segs):
                    ids.add(seg[IP].id)
                    if icrc_ok(seg):
                        ok += 1
                    else:
                        wrong += 1
                        if wrong <= args.show:
                            print(f"packet {n}: GSO segment {k} of {len(segs)}: wrong ICRC", file=sys.stderr)
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
        f"{seen} RoCE packets, {ok} verified, {wrong} wrong, {supers} UDP GSO super-packets split into their segments "
        f"(scapy {__import__('scapy').__version__}; IP identifications seen: {len(ids)} distinct, e.g. {shown})"
    )
    if seen < args.min:
        print(f"FAIL: fewer than {args.min} RoCE packets in {args.pcap}", file=sys.stderr)
        return 1
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
