//! Known answers from an implementation we did not write: packets the
//! Linux kernel's rxe sent to the soft NIC over a veth pair
//! (`tests/data/rxe-packets.txt`, captured by `scripts/rxe-interop-test.sh`).
//! The soft NIC must take each one apart and verify its ICRC over the
//! headers it arrived with; an ICRC computed as CRC-32C (Castagnoli, a
//! common mistake: it is the iSCSI/SCTP checksum, not the RoCE one) must
//! fail every one of them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddrV4};

use hipobj_softroce::wire::icrc::{Ipv4Udp, verify_over};
use hipobj_softroce::wire::{Opcode, Packet, PseudoHeader, ROCE_PORT};

fn packets() -> Vec<(&'static str, Vec<u8>)> {
    include_str!("data/rxe-packets.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (label, hex) = l.split_once('\t').expect("label<TAB>hex");
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            (label, bytes)
        })
        .collect()
}

/// A reflected CRC with initial value and final complement all ones, bit by
/// bit: `poly` 0xEDB88320 is CRC-32 (Ethernet, the ICRC's), 0x82F63B78 is
/// CRC-32C (Castagnoli).
fn crc(poly: u32, data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |mut c, &b| {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { poly ^ (c >> 1) } else { c >> 1 };
        }
        c
    })
}
const CRC32: u32 = 0xedb8_8320;
const CRC32C: u32 = 0x82f6_3b78;

/// What the annex says the ICRC covers, spelled out here without the NIC's
/// code: 8 bytes of ones, the IPv4 header with TOS, TTL and checksum set to
/// ones, the UDP header with its checksum set to ones, the BTH with byte 4
/// set to ones, and the rest up to the ICRC.
fn icrc_input(ip_packet: &[u8]) -> Vec<u8> {
    let mut v = vec![0xff; 8];
    let mut p = ip_packet[..ip_packet.len() - 4].to_vec();
    p[1] = 0xff;
    p[8] = 0xff;
    p[10] = 0xff;
    p[11] = 0xff;
    p[26] = 0xff;
    p[27] = 0xff;
    p[28 + 4] = 0xff;
    v.extend_from_slice(&p);
    v
}

#[test]
fn the_checker_crcs_are_what_they_claim() {
    assert_eq!(crc(CRC32, b"123456789"), 0xcbf4_3926);
    assert_eq!(crc(CRC32C, b"123456789"), 0xe306_9283);
}

#[test]
fn packets_from_rxe_parse_and_verify_over_the_headers_they_came_with() {
    let ps = packets();
    assert_eq!(ps.len(), 3);
    let want = [Opcode::Acknowledge, Opcode::ReadRequest, Opcode::WriteLastImm];
    for ((label, bytes), op) in ps.iter().zip(want) {
        let ip = Ipv4Udp::parse(bytes).expect(label);
        assert_eq!(*ip.src.ip(), Ipv4Addr::new(10, 77, 0, 1), "{label}");
        assert_eq!(ip.dst, SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 2), ROCE_PORT));
        assert_ne!(ip.src.port(), ROCE_PORT, "{label}: rxe's source port is entropy");
        let id = u16::from_be_bytes([bytes[4], bytes[5]]);
        assert_ne!(id, 0, "{label}: rxe numbers its packets");
        let p = Packet::parse_over(ip.payload, &ip.ip_udp).expect(label);
        assert_eq!(p.headers.bth.opcode, op, "{label}");
        assert!(verify_over(&ip.ip_udp, ip.payload), "{label}");
        // Under the header a UDP socket link assumes (identification 0) the
        // same bytes fail: only a link that sees the real header verifies
        // rxe.
        let assumed = PseudoHeader {
            src: ip.src,
            dst: ip.dst,
        };
        assert!(!assumed.verify(ip.payload), "{label}");
        // One flipped bit anywhere in the covered bytes fails.
        let mut bad = bytes.clone();
        let at = bad.len() - 5;
        bad[at] ^= 1;
        let ipb = Ipv4Udp::parse(&bad).unwrap();
        assert!(Packet::parse_over(ipb.payload, &ipb.ip_udp).is_err(), "{label}");
    }
}

#[test]
fn an_icrc_computed_as_crc32c_fails_every_rxe_packet() {
    for (label, bytes) in packets() {
        let on_wire = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap());
        let input = icrc_input(&bytes);
        assert_eq!(crc(CRC32, &input), on_wire, "{label}: CRC-32 is the ICRC");
        assert_ne!(crc(CRC32C, &input), on_wire, "{label}: CRC-32C must not pass");
    }
}
