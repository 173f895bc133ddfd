#!/usr/bin/env bash
# Captures a soft RoCE exchange through the device's pcap tap and checks it
# with an independent dissector:
#
#   1. every frame decodes as RoCEv2 (tshark's InfiniBand dissector on UDP
#      4791), none is malformed, and tshark raises no error-level expert info
#      other than the NAK the capture provokes on purpose;
#   2. the opcodes of SEND, SEND with immediate, WRITE, WRITE with immediate,
#      READ request/response and ACK all appear;
#   3. the ICRC of every frame is right: tshark 4.0 shows the ICRC but does
#      not verify it, so this script recomputes it with Python's zlib over
#      the masked IPv4/UDP/BTH headers as the RoCEv2 annex defines, and
#      checks that a frame with one flipped byte fails.
#
# Usage: scripts/softroce-tshark.sh [OUT_DIR]   (default: target/softroce-tshark)
# Needs tshark (Debian: apt-get install tshark; installed here if missing
# and running as root) and python3.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
out="${1:-target/softroce-tshark}"
mkdir -p "$out"
pcap="$out/softroce.pcap"

if ! command -v tshark >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
        apt-get update -qq && apt-get install -y -qq tshark >/dev/null
    else
        echo "tshark is missing: apt-get install tshark" >&2
        exit 1
    fi
fi

bin=$(build_workspace)
"$bin/examples/capture" "$pcap"

# tshark errors (a bad filter, an unreadable file) stop the script: with
# pipefail a failed tshark fails its pipeline instead of counting zero.
ts() { tshark -r "$pcap" -d udp.port==4791,infiniband "$@" 2> >(grep -v '^Running as user' >&2); }

fail=0
frames=$(ts -T fields -e frame.number | wc -l)
roce=$(ts -Y infiniband -T fields -e frame.number | wc -l)
malformed=$(ts -Y '_ws.malformed' -T fields -e frame.number | wc -l)
# The last WRITE is refused on purpose; its NAK is the only expected error.
errors=$(ts -Y '_ws.expert.severity >= 8388608 && !(infiniband.aeth.syndrome == 0x62)' -T fields -e frame.number | wc -l)
echo "frames: $frames, decoded as RoCE: $roce, malformed: $malformed, other expert errors: $errors"
[ "$frames" -gt 0 ] && [ "$roce" = "$frames" ] || { echo "FAIL: not every frame decodes as RoCE" >&2; fail=1; }
[ "$malformed" = 0 ] || { echo "FAIL: malformed frames" >&2; fail=1; }
[ "$errors" = 0 ] || { echo "FAIL: expert errors" >&2; fail=1; }

opcodes=$(ts -T fields -e infiniband.bth.opcode | sort -un | tr '\n' ' ')
echo "opcodes seen: $opcodes"
for want in 0 1 2 3 6 7 8 9 12 13 14 15 17; do
    grep -qw "$want" <<<"$opcodes" || { echo "FAIL: opcode $want missing" >&2; fail=1; }
done

ts -T fields -e frame.number -e infiniband.invariant.crc >"$out/tshark-icrc.txt"
python3 - "$pcap" "$out/tshark-icrc.txt" <<'PY' || fail=1
import struct, sys, zlib

def icrc(ip_udp, roce):
    ip = bytearray(ip_udp[:20]); udp = bytearray(ip_udp[20:28]); bth = bytearray(roce[:12])
    ip[1] = 0xff; ip[8] = 0xff; ip[10:12] = b"\xff\xff"   # TOS, TTL, header checksum
    udp[6:8] = b"\xff\xff"                                 # UDP checksum
    bth[4] = 0xff                                          # FECN, BECN, resv6
    return zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + roce[12:-4])

data = open(sys.argv[1], "rb").read()
magic, _, _, _, _, _, linktype = struct.unpack("<IHHiIII", data[:24])
assert magic == 0xa1b2c3d4 and linktype == 101, "expected a LINKTYPE_RAW pcap"
shown = {}
for row in open(sys.argv[2]):
    num, crc = row.split()
    shown[int(num)] = int(crc, 16)
at, n, bad = 24, 0, 0
while at < len(data):
    _, _, incl, _ = struct.unpack("<IIII", data[at:at + 16])
    frame = data[at + 16:at + 16 + incl]
    at += 16 + incl
    n += 1
    ihl = (frame[0] & 0xf) * 4
    ip_udp, roce = frame[:ihl + 8], frame[ihl + 8:]
    want = icrc(ip_udp, roce)
    got = struct.unpack("<I", roce[-4:])[0]
    if want != got:
        bad += 1
        print(f"frame {n}: ICRC {got:#010x}, computed {want:#010x}", file=sys.stderr)
    # tshark reads the same four bytes (big-endian): the field it shows must be them.
    if shown.get(n) != struct.unpack(">I", roce[-4:])[0]:
        bad += 1
        print(f"frame {n}: tshark shows ICRC {shown.get(n)}, bytes say otherwise", file=sys.stderr)
    if n == 1:
        broken = bytearray(roce); broken[20] ^= 1
        assert icrc(ip_udp, bytes(broken)) != got, "the check must catch a flipped byte"
print(f"ICRC verified on {n - bad} of {n} frames")
sys.exit(1 if bad or n == 0 else 0)
PY

if [ "$fail" = 0 ]; then
    echo "PASS: $pcap decodes cleanly and every ICRC is right"
else
    echo "FAIL: see above; capture kept at $pcap" >&2
fi
exit "$fail"
