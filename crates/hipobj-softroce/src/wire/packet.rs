//! A whole RoCE packet: the headers its opcode calls for, a payload, pad and
//! ICRC, parsed from or emitted into one UDP datagram.

use super::aeth::{self, Aeth, AethRepr};
use super::bth::{self, Bth, BthRepr};
use super::icrc::{self, PseudoHeader};
use super::immdt::{self, ImmDt};
use super::reth::{self, Reth, RethRepr};
use super::{Error, MAX_PACKET, MAX_PAYLOAD, Result};

/// The headers of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Base transport header.
    pub bth: BthRepr,
    /// RDMA extended header, for opcodes that carry one.
    pub reth: Option<RethRepr>,
    /// ACK extended header, for opcodes that carry one.
    pub aeth: Option<AethRepr>,
    /// Immediate data, for opcodes that carry it.
    pub imm: Option<u32>,
}

/// Pad bytes that bring `payload_len` to a multiple of 4.
pub const fn pad_for(payload_len: usize) -> u8 {
    ((4 - payload_len % 4) % 4) as u8
}

impl Headers {
    /// Bytes of headers (BTH plus the extended headers present).
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN
            + if self.reth.is_some() { reth::HEADER_LEN } else { 0 }
            + if self.aeth.is_some() { aeth::HEADER_LEN } else { 0 }
            + if self.imm.is_some() { immdt::HEADER_LEN } else { 0 }
    }

    /// Bytes of the whole datagram with `payload_len` bytes of payload.
    pub fn datagram_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + usize::from(pad_for(payload_len)) + icrc::LEN
    }

    /// Writes a whole datagram into `buf`: the headers (with the pad count
    /// for `payload_len`), the payload that `fill` writes into the slice it
    /// is given, zero pad, and the ICRC for `pseudo`. Returns the datagram
    /// length, or `None` if `buf` is shorter than [`Headers::datagram_len`].
    ///
    /// The headers written are the ones present in `self`, in wire order;
    /// the caller pairs them with the opcode (the engine always does).
    pub fn emit(
        &self,
        payload_len: usize,
        pseudo: &PseudoHeader,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Option<usize> {
        let len = self.datagram_len(payload_len);
        let buf = buf.get_mut(..len)?;
        let mut bth = self.bth;
        bth.pad_count = pad_for(payload_len);
        let (head, rest) = buf.split_at_mut(bth::HEADER_LEN);
        bth.emit(&mut Bth::new_unchecked(head));
        let mut rest = rest;
        if let Some(r) = &self.reth {
            let (h, t) = rest.split_at_mut(reth::HEADER_LEN);
            r.emit(&mut Reth::new_unchecked(h));
            rest = t;
        }
        if let Some(a) = &self.aeth {
            let (h, t) = rest.split_at_mut(aeth::HEADER_LEN);
            a.emit(&mut Aeth::new_unchecked(h));
            rest = t;
        }
        if let Some(imm) = self.imm {
            let (h, t) = rest.split_at_mut(immdt::HEADER_LEN);
            ImmDt::new_unchecked(h).set_imm(imm);
            rest = t;
        }
        let (payload, rest) = rest.split_at_mut(payload_len);
        fill(payload);
        let pad = usize::from(bth.pad_count);
        rest[..pad].fill(0);
        pseudo.seal(buf);
        Some(len)
    }
}

/// A parsed packet: its headers and a view of its payload (pad excluded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The headers.
    pub headers: Headers,
    /// The payload.
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Parses an untrusted datagram received from `pseudo.src` at
    /// `pseudo.dst`, checking lengths, the ICRC, the BTH version, the opcode,
    /// and the pad. Never panics.
    pub fn parse(datagram: &'a [u8], pseudo: &PseudoHeader) -> Result<Self> {
        Self::check_size(datagram)?;
        if !pseudo.verify(datagram) {
            return Err(Error::BadIcrc);
        }
        Self::parse_unverified(datagram)
    }

    /// Parses an untrusted datagram that arrived under the IPv4 and UDP
    /// headers `ip_udp` (as received, so the ICRC is checked against what
    /// actually travelled), with the same checks as [`Packet::parse`].
    pub fn parse_over(datagram: &'a [u8], ip_udp: &[u8; icrc::IP_UDP_LEN]) -> Result<Self> {
        Self::check_size(datagram)?;
        if !icrc::verify_over(ip_udp, datagram) {
            return Err(Error::BadIcrc);
        }
        Self::parse_unverified(datagram)
    }

    /// Parses a datagram without checking its ICRC (for printing captures
    /// and for fuzzing past the checksum). Never panics.
    pub fn parse_unverified(datagram: &'a [u8]) -> Result<Self> {
        Self::check_size(datagram)?;
        let bth = BthRepr::parse(&Bth::new_checked(datagram)?)?;
        let layout = bth.opcode.layout().ok_or(Error::BadOpcode)?;
        if !datagram.len().is_multiple_of(4) {
            return Err(Error::BadPad);
        }
        let mut at = bth::HEADER_LEN;
        let mut take = |n: usize| -> Result<&'a [u8]> {
            let s = datagram.get(at..at + n).ok_or(Error::Truncated)?;
            at += n;
            Ok(s)
        };
        let reth = match layout.reth {
            true => Some(RethRepr::parse(&Reth::new_checked(take(reth::HEADER_LEN)?)?)?),
            false => None,
        };
        let aeth = match layout.aeth {
            true => Some(AethRepr::parse(&Aeth::new_checked(take(aeth::HEADER_LEN)?)?)?),
            false => None,
        };
        let imm = match layout.immdt {
            true => Some(ImmDt::new_checked(take(immdt::HEADER_LEN)?)?.imm()),
            false => None,
        };
        let tail = usize::from(bth.pad_count) + icrc::LEN;
        let payload_len = datagram.len().checked_sub(at + tail).ok_or(Error::Truncated)?;
        if !layout.payload && (payload_len != 0 || bth.pad_count != 0) {
            return Err(Error::Oversized);
        }
        if payload_len > MAX_PAYLOAD {
            return Err(Error::Oversized);
        }
        Ok(Self {
            headers: Headers { bth, reth, aeth, imm },
            payload: &datagram[at..at + payload_len],
        })
    }

    fn check_size(datagram: &[u8]) -> Result<()> {
        if datagram.len() < bth::HEADER_LEN + icrc::LEN {
            Err(Error::Truncated)
        } else if datagram.len() > MAX_PACKET {
            Err(Error::Oversized)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Opcode, Syndrome, bth::DEFAULT_PKEY};
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn pseudo() -> PseudoHeader {
        PseudoHeader {
            src: SocketAddrV4::new(Ipv4Addr::new(127, 1, 0, 1), 4791),
            dst: SocketAddrV4::new(Ipv4Addr::new(127, 1, 0, 2), 4791),
        }
    }

    fn bth(opcode: Opcode, psn: u32) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp: 0x12,
            ack_req: true,
            psn,
        }
    }

    fn write_only_imm() -> Headers {
        Headers {
            bth: bth(Opcode::WriteOnlyImm, 7),
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 0x55,
                dma_len: 5,
            }),
            aeth: None,
            imm: Some(0xabcd),
        }
    }

    #[test]
    fn emit_then_parse() {
        let h = write_only_imm();
        let mut buf = [0u8; 128];
        let len = h
            .emit(5, &pseudo(), &mut buf, |p| p.copy_from_slice(b"hello"))
            .expect("fits");
        assert_eq!(len, 12 + 16 + 4 + 5 + 3 + 4);
        let p = Packet::parse(&buf[..len], &pseudo()).expect("valid");
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.headers.bth.pad_count, 3);
        assert_eq!(p.headers.reth, h.reth);
        assert_eq!(p.headers.imm, Some(0xabcd));
        // Literal bytes of the headers, as the spec lays them out.
        assert_eq!(&buf[..4], &[0x0b, 0x70, 0xff, 0xff]);
        assert_eq!(&buf[28..32], &[0x00, 0x00, 0xab, 0xcd]);
        assert_eq!(&buf[37..40], &[0, 0, 0]);
    }

    #[test]
    fn ack_has_no_payload() {
        let h = Headers {
            bth: bth(Opcode::Acknowledge, 3),
            reth: None,
            aeth: Some(AethRepr {
                syndrome: Syndrome::NakSequence,
                msn: 9,
            }),
            imm: None,
        };
        let mut buf = [0u8; 64];
        let len = h.emit(0, &pseudo(), &mut buf, |_| {}).expect("fits");
        assert_eq!(len, 20);
        let p = Packet::parse(&buf[..len], &pseudo()).expect("valid");
        assert_eq!(p.headers.aeth.map(|a| a.syndrome), Some(Syndrome::NakSequence));
        assert!(p.payload.is_empty());
    }

    #[test]
    fn bad_datagrams_are_refused_with_their_reason() {
        let h = write_only_imm();
        let mut buf = [0u8; 128];
        let len = h.emit(5, &pseudo(), &mut buf, |p| p.fill(1)).expect("fits");
        let ps = pseudo();
        // Truncated anywhere.
        for cut in 0..len {
            assert!(Packet::parse(&buf[..cut], &ps).is_err(), "cut {cut}");
        }
        assert_eq!(Packet::parse(&buf[..10], &ps), Err(Error::Truncated));
        // Bad ICRC.
        let mut bad = buf;
        bad[30] ^= 0x10;
        assert_eq!(Packet::parse(&bad[..len], &ps), Err(Error::BadIcrc));
        // Unknown opcode, resealed so that only the opcode is wrong.
        let mut bad = buf;
        bad[0] = 0x13;
        ps.seal(&mut bad[..len]);
        assert_eq!(Packet::parse(&bad[..len], &ps), Err(Error::BadOpcode));
        // A length that is not a multiple of 4 (resealed, one byte longer).
        let mut bad = buf;
        ps.seal(&mut bad[..len + 1]);
        assert_eq!(Packet::parse(&bad[..len + 1], &ps), Err(Error::BadPad));
        // Oversized.
        let big = [0u8; MAX_PACKET + 4];
        assert_eq!(Packet::parse(&big, &ps), Err(Error::Oversized));
        // A payload on a READ request.
        let rr = Headers {
            bth: bth(Opcode::ReadRequest, 1),
            reth: Some(RethRepr {
                va: 0,
                rkey: 1,
                dma_len: 8,
            }),
            aeth: None,
            imm: None,
        };
        let len = rr.emit(4, &ps, &mut buf, |p| p.fill(0)).expect("fits");
        assert_eq!(Packet::parse(&buf[..len], &ps), Err(Error::Oversized));
    }

    #[test]
    fn emit_into_short_buffer_is_refused() {
        let mut buf = [0u8; 20];
        assert_eq!(write_only_imm().emit(5, &pseudo(), &mut buf, |_| {}), None);
    }
}
