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
        self.ip_udp_header_with_id(udp_payload_len, 0)
    }

    /// [`PseudoHeader::ip_udp_header`] with IP identification `id`: the
    /// header of segment `id` of a UDP GSO super-packet, which the kernel
    /// numbers from the super-packet's identification 0 up
    /// ([`segment_id_delta`]).
    pub fn ip_udp_header_with_id(&self, udp_payload_len: usize, id: u16) -> [u8; IP_UDP_LEN] {
        let mut h = [0u8; IP_UDP_LEN];
        h[4..6].copy_from_slice(&id.to_be_bytes());
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

/// What to XOR into the ICRC of a datagram of `datagram_len` bytes (ICRC
/// included) sealed under IP identification 0 to make it the ICRC of the
/// same datagram under identification `id`, all else equal.
///
/// The ICRC is an affine function of the bytes it covers, so two messages
/// of one length that differ only in the identification field differ in
/// their CRC by an amount that depends on nothing but that difference and
/// the length: it is computed here over all-zero packets. UDP GSO needs it:
/// the kernel gives segment `k` of a super-packet sent with identification
/// 0 the identification `k`, and the sender seals every packet under 0
/// before it knows where a packet lands in a super-packet.
pub fn segment_id_delta(id: u16, datagram_len: usize) -> u32 {
    let Some(body) = datagram_len.checked_sub(LEN) else {
        return 0;
    };
    let zero = vec![0u8; body];
    let any = PseudoHeader {
        src: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
        dst: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
    };
    icrc_over(&any.ip_udp_header_with_id(datagram_len, id), &zero)
        ^ icrc_over(&any.ip_udp_header_with_id(datagram_len, 0), &zero)
}

/// A cache of [`segment_id_delta`]: a sender sees few packet lengths and at
/// most 64 segments per super-packet, so each pair is computed once.
#[derive(Debug, Default)]
pub struct SegmentDeltas {
    known: std::collections::HashMap<(u16, usize), u32>,
}

impl SegmentDeltas {
    /// [`segment_id_delta`]`(id, datagram_len)`, 0 for identification 0.
    pub fn get(&mut self, id: u16, datagram_len: usize) -> u32 {
        if id == 0 {
            return 0;
        }
        if self.known.len() > 4096 {
            self.known.clear();
        }
        *self
            .known
            .entry((id, datagram_len))
            .or_insert_with(|| segment_id_delta(id, datagram_len))
    }

    /// The last 4 bytes of `datagram` (an ICRC sealed under identification
    /// 0) as they must read when it travels under identification `id`.
    pub fn icrc_for(&mut self, id: u16, datagram: &[u8]) -> [u8; LEN] {
        let mut icrc = [0u8; LEN];
        if let Some(tail) = datagram.len().checked_sub(LEN).and_then(|b| datagram.get(b..)) {
            icrc.copy_from_slice(tail);
        }
        (u32::from_le_bytes(icrc) ^ self.get(id, datagram.len())).to_le_bytes()
    }
}

/// The segment size of a UDP GSO super-packet seen whole (a raw socket or
/// a capture on loopback sees one IPv4 packet carrying many RoCE packets
/// back to back; the kernel cuts it into `size`-byte segments, the last one
/// possibly shorter, numbering their identifications from the
/// super-packet's up). `ip_udp` is the super-packet's header and `payload`
/// its UDP payload.
///
/// RoCE packets carry no length, so the size is found from the packets:
/// the smallest multiple of 4 at which a second BTH to the same QP with
/// the next PSN begins and the first segment's ICRC verifies under the
/// header the kernel gives it. `None` when no size fits: then it is one
/// packet (or garbage) and is parsed as such. Never panics.
///
/// At most [`GSO_SIZE_TRIES`] sizes get as far as the ICRC, so that a
/// hostile packet whose every 4-byte offset looks like the next BTH costs
/// a few CRCs, not a thousand.
pub fn gso_segment_size(ip_udp: &[u8; IP_UDP_LEN], payload: &[u8]) -> Option<usize> {
    let bth = payload.get(..super::bth::HEADER_LEN)?;
    let qp = &bth[5..8];
    let psn = u32::from_be_bytes([0, bth[9], bth[10], bth[11]]);
    let next = super::psn::add(psn, 1).to_be_bytes();
    let id = u16::from_be_bytes([ip_udp[4], ip_udp[5]]);
    let max = super::MAX_PACKET.min(payload.len() - 1);
    (super::bth::HEADER_LEN + LEN..=max)
        .step_by(4)
        .filter(|&s| {
            payload
                .get(s..s + super::bth::HEADER_LEN)
                .is_some_and(|b| &b[5..8] == qp && b[9..12] == next[1..4])
        })
        .take(GSO_SIZE_TRIES)
        .find(|&s| verify_over(&segment_header(ip_udp, s, id), &payload[..s]))
}

/// How many candidate segment sizes [`gso_segment_size`] checks the ICRC
/// of: a real super-packet's payload rarely holds the next BTH's QP and PSN
/// at an aligned offset before the true boundary.
pub const GSO_SIZE_TRIES: usize = 8;

/// The IPv4 and UDP header of a `len`-byte segment of the super-packet
/// whose header is `ip_udp`, with identification `id`: what the kernel's
/// UDP segmentation writes (lengths and identification change; the
/// checksums it also rewrites are masked out of the ICRC).
pub fn segment_header(ip_udp: &[u8; IP_UDP_LEN], len: usize, id: u16) -> [u8; IP_UDP_LEN] {
    let mut h = *ip_udp;
    h[2..4].copy_from_slice(&((IP_UDP_LEN + len) as u16).to_be_bytes());
    h[4..6].copy_from_slice(&id.to_be_bytes());
    h[24..26].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    h
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

    /// The ICRC of a packet under identification `k` is the one sealed
    /// under 0 with the segment delta XORed in, for any length and `k`, and
    /// the cache gives the same answers.
    #[test]
    fn the_icrc_per_segment_identification_is_the_sealed_one_patched() {
        let p = pseudo();
        let mut deltas = SegmentDeltas::default();
        for len in [16usize, 20, 1040, 4112, 4128] {
            let mut pkt: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
            p.seal(&mut pkt);
            for k in [0u16, 1, 2, 14, 63, 0xffff] {
                let mut direct = pkt.clone();
                seal_over(&p.ip_udp_header_with_id(len, k), &mut direct);
                assert_eq!(deltas.icrc_for(k, &pkt), direct[len - 4..], "len {len} id {k}");
                let want = u32::from_le_bytes(direct[len - 4..].try_into().expect("4"))
                    ^ u32::from_le_bytes(pkt[len - 4..].try_into().expect("4"));
                assert_eq!(segment_id_delta(k, len), want);
                if k != 0 {
                    assert_ne!(direct, pkt, "the identification is covered");
                }
            }
        }
        assert_eq!(segment_id_delta(5, 3), 0);
    }

    /// A GSO super-packet seen whole is cut back where the kernel cuts it:
    /// the first segment's size, found from the second BTH and the first
    /// ICRC; a packet alone or garbage gives no size.
    #[test]
    fn a_super_packet_seen_whole_is_cut_where_the_kernel_cuts_it() {
        let p = pseudo();
        let make = |len: usize, psn: u32, id: u16| {
            let mut pkt: Vec<u8> = (0..len).map(|i| (i * 7 + psn as usize) as u8).collect();
            pkt[0] = 0x07;
            pkt[5..8].copy_from_slice(&[0, 0, 0x33]);
            pkt[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
            seal_over(&p.ip_udp_header_with_id(len, id), &mut pkt);
            pkt
        };
        for (size, n, last) in [(4112, 15, 4112), (4112, 3, 1040), (1040, 2, 20), (272, 64, 16)] {
            let mut payload = Vec::new();
            for k in 0..n {
                let len = if k == n - 1 { last } else { size };
                payload.extend(make(len, 0xff_fff0 + k as u32, k as u16));
            }
            let sup = p.ip_udp_header(payload.len());
            assert_eq!(gso_segment_size(&sup, &payload), Some(size), "{size} x {n}");
            for (k, seg) in payload.chunks(size).enumerate() {
                assert!(verify_over(&segment_header(&sup, seg.len(), k as u16), seg));
            }
            // Sealed under the wrong identifications: no size fits.
            let mut wrong = Vec::new();
            for k in 0..n {
                let len = if k == n - 1 { last } else { size };
                wrong.extend(make(len, 0xff_fff0 + k as u32, 7));
            }
            assert_eq!(gso_segment_size(&sup, &wrong), None);
        }
        // A payload that looks like the next BTH (QP 2, PSN 2) at every
        // aligned offset: only the first GSO_SIZE_TRIES sizes get an ICRC
        // check, so the true boundary at 4112 is not reached and the
        // packet stays whole (and fails its ICRC as one packet).
        let mut first = vec![0u8; 4112];
        for at in (0..4112 - 12).step_by(4) {
            first[at + 5..at + 8].copy_from_slice(&[0, 0, 2]);
            first[at + 9..at + 12].copy_from_slice(&[0, 0, 2]);
        }
        first[0] = 0x07;
        first[9..12].copy_from_slice(&[0, 0, 1]);
        seal_over(&p.ip_udp_header_with_id(4112, 0), &mut first);
        let mut second = first.clone();
        second[9..12].copy_from_slice(&[0, 0, 2]);
        seal_over(&p.ip_udp_header_with_id(4112, 1), &mut second);
        let mut hostile = first.clone();
        hostile.extend(&second);
        let sup = p.ip_udp_header(hostile.len());
        assert!(verify_over(&segment_header(&sup, 4112, 0), &hostile[..4112]));
        assert_eq!(gso_segment_size(&sup, &hostile), None);
        let one = make(4112, 1, 0);
        assert_eq!(gso_segment_size(&p.ip_udp_header(4112), &one), None);
        for len in 0..40 {
            let junk = vec![0u8; len];
            assert_eq!(gso_segment_size(&p.ip_udp_header(len), &junk), None);
        }
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
