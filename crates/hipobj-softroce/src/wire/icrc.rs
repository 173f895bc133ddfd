//! The invariant CRC of RoCEv2 (IBA annex A17, "RoCEv2", section A17.4.4).
//!
//! The ICRC is the CRC-32 of Ethernet (reflected polynomial 0xEDB88320,
//! initial value all ones, final complement) taken over:
//!
//! 1. 8 bytes of 0xFF standing for the masked LRH of InfiniBand,
//! 2. the IPv4 header with Type of Service, TTL and header checksum set to
//!    all ones,
//! 3. the UDP header with its checksum set to all ones,
//! 4. the BTH with its reserved byte 4 (FECN, BECN, resv6) set to all ones,
//! 5. the rest of the packet: extended headers, payload and pad.
//!
//! It is appended after the pad in little-endian byte order (the order in
//! which the CRC register shifts out, as Linux rxe and hardware emit it).
//!
//! The IP and UDP headers covered must be the ones on the wire. The UDP link
//! never sees them, so it seals over the header the kernel is made to build
//! ([`PseudoHeader::ip_udp_header`]: identification 0 and DF, which the link
//! obtains with `IP_PMTUDISC_DO` on an unconnected socket, see
//! `link::udp::set_dont_fragment`). The same bytes open every packet in the
//! pcap tap.

use std::net::SocketAddrV4;

/// Bytes of ICRC at the end of every packet.
pub const LEN: usize = 4;

/// Bytes of the synthesized IPv4 (20) and UDP (8) headers.
pub const IP_UDP_LEN: usize = 28;

/// Feeds `data` into a CRC-32 register (no initial or final complement).
///
/// crc32fast does the work: it uses the CPU's carry-less multiply where
/// there is one, and the ICRC of every packet is computed twice (once to
/// seal, once to verify), so this is the soft NIC's hottest loop.
pub fn crc32_update(crc: u32, data: &[u8]) -> u32 {
    // crc32fast keeps its state complemented (as a finished CRC), so a
    // register value goes in and comes out complemented.
    let mut h = crc32fast::Hasher::new_with_initial(!crc);
    h.update(data);
    !h.finalize()
}

/// The CRC-32 of Ethernet and zlib.
pub fn crc32(data: &[u8]) -> u32 {
    !crc32_update(!0, data)
}

/// The two UDP endpoints of a datagram: what the ICRC covers besides the
/// packet itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PseudoHeader {
    /// Sender.
    pub src: SocketAddrV4,
    /// Receiver.
    pub dst: SocketAddrV4,
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl PseudoHeader {
    /// The IPv4 and UDP headers of a datagram carrying `udp_payload_len`
    /// bytes between these endpoints: version 4, IHL 5, DSCP/ECN 0,
    /// identification 0, don't-fragment, TTL 64, protocol UDP, a valid header
    /// checksum, and UDP checksum 0 (none, legal over IPv4).
    pub fn ip_udp_header(&self, udp_payload_len: usize) -> [u8; IP_UDP_LEN] {
        let mut h = [0u8; IP_UDP_LEN];
        let total = (IP_UDP_LEN + udp_payload_len) as u16;
        let udp_len = (8 + udp_payload_len) as u16;
        h[0] = 0x45;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[6] = 0x40;
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&self.src.ip().octets());
        h[16..20].copy_from_slice(&self.dst.ip().octets());
        let sum = ipv4_checksum(&h[..20]);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        h[20..22].copy_from_slice(&self.src.port().to_be_bytes());
        h[22..24].copy_from_slice(&self.dst.port().to_be_bytes());
        h[24..26].copy_from_slice(&udp_len.to_be_bytes());
        h
    }

    /// The ICRC of `packet`, which holds everything from the BTH through the
    /// pad but not the ICRC itself, over the synthesized headers.
    pub fn icrc(&self, packet: &[u8]) -> u32 {
        icrc_over(&self.ip_udp_header(packet.len() + LEN), packet)
    }

    /// Writes the ICRC into the last 4 bytes of `datagram`, computed over the
    /// bytes before them. Does nothing to a datagram shorter than 4 bytes.
    pub fn seal(&self, datagram: &mut [u8]) {
        seal_over(&self.ip_udp_header(datagram.len()), datagram);
    }

    /// Whether the last 4 bytes of `datagram` are the ICRC of the rest.
    pub fn verify(&self, datagram: &[u8]) -> bool {
        verify_over(&self.ip_udp_header(datagram.len()), datagram)
    }
}

/// The ICRC of `packet` (BTH through pad, no ICRC) carried under the IPv4
/// header without options and the UDP header in `ip_udp`, exactly as they
/// are (or were) on the wire. The fields the annex masks (TOS, TTL, the two
/// checksums, BTH byte 4) may hold anything.
pub fn icrc_over(ip_udp: &[u8; IP_UDP_LEN], packet: &[u8]) -> u32 {
    let mut masked = *ip_udp;
    masked[1] = 0xff; // type of service
    masked[8] = 0xff; // TTL
    masked[10] = 0xff; // header checksum
    masked[11] = 0xff;
    masked[26] = 0xff; // UDP checksum
    masked[27] = 0xff;
    let mut crc = crc32_update(!0, &[0xff; 8]);
    crc = crc32_update(crc, &masked);
    let (bth, rest) = packet.split_at(packet.len().min(super::bth::HEADER_LEN));
    let mut bth_masked = [0u8; super::bth::HEADER_LEN];
    bth_masked[..bth.len()].copy_from_slice(bth);
    bth_masked[4] = 0xff;
    crc = crc32_update(crc, &bth_masked[..bth.len()]);
    crc = crc32_update(crc, rest);
    !crc
}

/// Writes the ICRC of `datagram` under `ip_udp` into its last 4 bytes.
pub fn seal_over(ip_udp: &[u8; IP_UDP_LEN], datagram: &mut [u8]) {
    let Some(body_len) = datagram.len().checked_sub(LEN) else {
        return;
    };
    let icrc = icrc_over(ip_udp, &datagram[..body_len]);
    datagram[body_len..].copy_from_slice(&icrc.to_le_bytes());
}

/// Whether `datagram` ends in the ICRC of the rest under `ip_udp`.
pub fn verify_over(ip_udp: &[u8; IP_UDP_LEN], datagram: &[u8]) -> bool {
    let Some(body_len) = datagram.len().checked_sub(LEN) else {
        return false;
    };
    let (body, tail) = datagram.split_at(body_len);
    icrc_over(ip_udp, body).to_le_bytes() == tail
}

/// An IPv4 packet carrying a UDP datagram, taken apart for the ICRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Udp<'a> {
    /// The IPv4 header (no options) and UDP header as received.
    pub ip_udp: [u8; IP_UDP_LEN],
    /// Sender address and UDP port.
    pub src: SocketAddrV4,
    /// Receiver address and UDP port.
    pub dst: SocketAddrV4,
    /// The UDP payload.
    pub payload: &'a [u8],
}

impl<'a> Ipv4Udp<'a> {
    /// Splits a whole IPv4 packet (as a raw IP socket delivers it) into its
    /// headers and UDP payload. Refuses (`None`) anything but an
    /// unfragmented IPv4 UDP packet without IP options whose IP and UDP
    /// lengths agree with the bytes received. Never panics.
    pub fn parse(packet: &'a [u8]) -> Option<Self> {
        let ip_udp: [u8; IP_UDP_LEN] = packet.get(..IP_UDP_LEN)?.try_into().ok()?;
        let total = usize::from(u16::from_be_bytes([ip_udp[2], ip_udp[3]]));
        let frag = u16::from_be_bytes([ip_udp[6], ip_udp[7]]);
        let udp_len = usize::from(u16::from_be_bytes([ip_udp[24], ip_udp[25]]));
        let ok = ip_udp[0] == 0x45
            && ip_udp[9] == 17
            && frag & 0x3fff == 0 // neither more-fragments nor an offset
            && total == packet.len()
            && udp_len == total - 20;
        if !ok {
            return None;
        }
        let addr = |ip: usize, port: usize| {
            SocketAddrV4::new(
                std::net::Ipv4Addr::new(ip_udp[ip], ip_udp[ip + 1], ip_udp[ip + 2], ip_udp[ip + 3]),
                u16::from_be_bytes([ip_udp[port], ip_udp[port + 1]]),
            )
        };
        Some(Self {
            ip_udp,
            src: addr(12, 20),
            dst: addr(16, 22),
            payload: &packet[IP_UDP_LEN..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn pseudo() -> PseudoHeader {
        PseudoHeader {
            src: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 4791),
            dst: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), 4791),
        }
    }

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        // Long input, and a register carried across pieces, against a
        // bit-by-bit reference.
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let bitwise = !data.iter().fold(!0u32, |mut c, &b| {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            c
        });
        assert_eq!(crc32(&data), bitwise);
        let (a, b) = data.split_at(333);
        assert_eq!(!crc32_update(crc32_update(!0, a), b), bitwise);
    }

    /// A known answer computed independently (Python's zlib.crc32 over the
    /// masked headers, as scripts/softroce-tshark.sh does): an ACK from
    /// 127.64.0.2 to 127.64.0.1, QP 0x11, PSN 0x100, MSN 1.
    #[test]
    fn icrc_known_answer() {
        let p = PseudoHeader {
            src: SocketAddrV4::new(Ipv4Addr::new(127, 64, 0, 2), 4791),
            dst: SocketAddrV4::new(Ipv4Addr::new(127, 64, 0, 1), 4791),
        };
        let mut pkt = [
            0x11, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x01, 0x00, 0x1f, 0x00, 0x00, 0x01,
            0, 0, 0, 0,
        ];
        p.seal(&mut pkt);
        assert_eq!(&pkt[16..], &[22, 93, 11, 42]);
    }

    #[test]
    fn ipv4_udp_packets_are_taken_apart_and_odd_ones_refused() {
        let p = pseudo();
        let payload = [9u8; 24];
        let mut pkt = p.ip_udp_header(payload.len()).to_vec();
        pkt.extend_from_slice(&payload);
        let got = Ipv4Udp::parse(&pkt).expect("a plain IPv4/UDP packet");
        assert_eq!((got.src, got.dst, got.payload), (p.src, p.dst, &payload[..]));
        assert_eq!(&got.ip_udp[..], &pkt[..IP_UDP_LEN]);
        for cut in 0..pkt.len() {
            assert_eq!(Ipv4Udp::parse(&pkt[..cut]), None, "cut at {cut}");
        }
        let broken = |at: usize, v: u8| {
            let mut b = pkt.clone();
            b[at] = v;
            Ipv4Udp::parse(&b).is_none()
        };
        assert!(broken(0, 0x46), "IP options");
        assert!(broken(0, 0x65), "not IPv4");
        assert!(broken(9, 6), "TCP");
        assert!(broken(6, 0x20), "more fragments");
        assert!(broken(7, 1), "a fragment offset");
        assert!(broken(25, 9), "UDP length");
        // The identification and DF are the sender's to choose.
        assert!(!broken(4, 0x12));
        assert!(!broken(6, 0));
    }

    /// The ICRC covers the identification: a packet sealed under one header
    /// fails under a header that differs only there, and verifies under its
    /// own however the masked fields (TOS, TTL, checksums) change in transit.
    #[test]
    fn the_icrc_covers_the_header_as_sent() {
        let p = pseudo();
        let mut pkt = [0u8; 12 + 8 + 4];
        pkt[0] = 0x04;
        pkt[7] = 0x11;
        let mut hdr = p.ip_udp_header(pkt.len());
        hdr[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        seal_over(&hdr, &mut pkt);
        assert!(verify_over(&hdr, &pkt));
        assert!(!p.verify(&pkt), "identification 0 is another header");
        let mut hop = hdr;
        hop[1] = 0x02; // ECN
        hop[8] = 63; // one router later
        hop[10] ^= 0x55;
        hop[26] = 0x12; // a UDP checksum
        assert!(verify_over(&hop, &pkt));
    }

    #[test]
    fn ip_header_checksum_is_valid() {
        let h = pseudo().ip_udp_header(100);
        assert_eq!(ipv4_checksum(&h[..20]), 0);
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 128);
        assert_eq!(u16::from_be_bytes([h[24], h[25]]), 108);
    }

    #[test]
    fn seal_then_verify_and_masked_fields_do_not_matter() {
        let mut pkt = [0u8; 12 + 8 + 4];
        pkt[0] = 0x04; // SEND Only
        pkt[1] = 0x40;
        pkt[7] = 0x11;
        pkt[12..20].copy_from_slice(b"payload!");
        let p = pseudo();
        p.seal(&mut pkt);
        assert!(p.verify(&pkt));
        // FECN/BECN live in the masked byte: flipping them keeps the ICRC.
        pkt[4] = 0xc0;
        assert!(p.verify(&pkt));
        // Any other bit breaks it.
        pkt[13] ^= 1;
        assert!(!p.verify(&pkt));
        pkt[13] ^= 1;
        // So does a different source address.
        let other = PseudoHeader {
            src: SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 9), 4791),
            ..p
        };
        assert!(!other.verify(&pkt));
        assert!(!p.verify(&pkt[..3]));
    }
}
