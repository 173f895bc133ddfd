//! The Base Transport Header: 12 bytes at the start of every packet.
//!
//! ```text
//! 0       opcode
//! 1       SE(7) M(6) PadCnt(5..4) TVer(3..0)
//! 2..4    P_Key
//! 4       FECN(7) BECN(6) reserved(5..0)   (masked to 1s in the ICRC)
//! 5..8    DestQP
//! 8       AckReq(7) reserved(6..0)
//! 9..12   PSN
//! ```

use super::{Error, Opcode, Result};

mod field {
    use core::ops::Range;
    pub(super) const OPCODE: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const PKEY: Range<usize> = 2..4;
    pub(super) const RESV8A: usize = 4;
    pub(super) const DEST_QP: Range<usize> = 5..8;
    pub(super) const ACK_REQ: usize = 8;
    pub(super) const PSN: Range<usize> = 9..12;
}

/// Bytes in a BTH.
pub const HEADER_LEN: usize = 12;

/// The default partition key (full membership, default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// A read/write view of a BTH.
#[derive(Debug, Clone)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

fn be24(b: &[u8]) -> u32 {
    b.iter().take(3).fold(0u32, |acc, &x| (acc << 8) | u32::from(x))
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// Wraps a buffer without checking its length (for emission into a buffer
    /// of at least [`HEADER_LEN`] bytes).
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking that every field lies inside it.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = Self::new_unchecked(buffer);
        b.check_len()?;
        Ok(b)
    }

    /// Whether the buffer holds a whole BTH.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode::from_u8(self.buffer.as_ref()[field::OPCODE])
    }

    /// The solicited-event bit.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }

    /// The migration-request bit.
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }

    /// Pad bytes (0..3) between the payload and the ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x3
    }

    /// The transport header version (0).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0xf
    }

    /// The partition key.
    pub fn pkey(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PKEY];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Forward congestion notification.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::RESV8A] & 0x80 != 0
    }

    /// Backward congestion notification.
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::RESV8A] & 0x40 != 0
    }

    /// The destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        be24(&self.buffer.as_ref()[field::DEST_QP])
    }

    /// Whether the requester asks for an acknowledgement.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }

    /// The packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        be24(&self.buffer.as_ref()[field::PSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    /// Sets the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = op.to_u8();
    }

    /// Sets SE, M, PadCnt and TVer.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.buffer.as_mut()[field::FLAGS] =
            (u8::from(solicited) << 7) | (u8::from(mig_req) << 6) | ((pad_count & 3) << 4) | (tver & 0xf);
    }

    /// Sets the partition key.
    pub fn set_pkey(&mut self, pkey: u16) {
        self.buffer.as_mut()[field::PKEY].copy_from_slice(&pkey.to_be_bytes());
    }

    /// Sets FECN and BECN, clearing the reserved bits.
    pub fn set_congestion(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::RESV8A] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }

    /// Sets the destination QP (low 24 bits of `qpn`).
    pub fn set_dest_qp(&mut self, qpn: u32) {
        self.buffer.as_mut()[field::DEST_QP].copy_from_slice(&qpn.to_be_bytes()[1..]);
    }

    /// Sets the AckReq bit, clearing the reserved bits.
    pub fn set_ack_req(&mut self, ack_req: bool) {
        self.buffer.as_mut()[field::ACK_REQ] = u8::from(ack_req) << 7;
    }

    /// Sets the PSN (low 24 bits of `psn`).
    pub fn set_psn(&mut self, psn: u32) {
        self.buffer.as_mut()[field::PSN].copy_from_slice(&psn.to_be_bytes()[1..]);
    }
}

/// The meaning of a BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Pad bytes after the payload.
    pub pad_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Destination QP.
    pub dest_qp: u32,
    /// Acknowledgement requested.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: u32,
}

impl BthRepr {
    /// Reads a checked BTH. Refuses a transport version other than 0.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<Self> {
        bth.check_len()?;
        if bth.tver() != 0 {
            return Err(Error::BadVersion);
        }
        Ok(Self {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            pad_count: bth.pad_count(),
            pkey: bth.pkey(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// Bytes [`BthRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (migration bit set, as RoCE requesters do; version 0;
    /// no congestion bits).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.set_opcode(self.opcode);
        bth.set_flags(self.solicited, true, self.pad_count, 0);
        bth.set_pkey(self.pkey);
        bth.set_congestion(false, false);
        bth.set_dest_qp(self.dest_qp);
        bth.set_ack_req(self.ack_req);
        bth.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RDMA WRITE First, M set, pad 0, P_Key 0xffff, QP 0x000011, A set, PSN 0x123456.
    const BYTES: [u8; 12] = [
        0x06, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x12, 0x34, 0x56,
    ];

    #[test]
    fn deconstruct() {
        let b = Bth::new_checked(&BYTES[..]).expect("whole header");
        assert_eq!(b.opcode(), Opcode::WriteFirst);
        assert!(b.mig_req() && !b.solicited());
        assert_eq!(b.pad_count(), 0);
        assert_eq!(b.tver(), 0);
        assert_eq!(b.pkey(), 0xffff);
        assert_eq!(b.dest_qp(), 0x11);
        assert!(b.ack_req());
        assert_eq!(b.psn(), 0x123456);
    }

    #[test]
    fn construct() {
        let repr = BthRepr {
            opcode: Opcode::WriteFirst,
            solicited: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            dest_qp: 0x11,
            ack_req: true,
            psn: 0x123456,
        };
        let mut buf = [0xaau8; HEADER_LEN];
        repr.emit(&mut Bth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(BthRepr::parse(&Bth::new_unchecked(&buf[..])), Ok(repr));
    }

    #[test]
    fn impossible_len() {
        assert_eq!(Bth::new_checked(&BYTES[..11]).err(), Some(Error::Truncated));
    }

    #[test]
    fn wide_values_are_truncated_to_24_bits() {
        let mut buf = [0u8; HEADER_LEN];
        let mut b = Bth::new_unchecked(&mut buf[..]);
        b.set_dest_qp(0xab12_3456);
        b.set_psn(0xffff_ffff);
        assert_eq!(b.dest_qp(), 0x12_3456);
        assert_eq!(b.psn(), 0xff_ffff);
    }

    #[test]
    fn version_other_than_zero_is_refused() {
        let mut buf = BYTES;
        buf[1] |= 0x01;
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&buf[..])),
            Err(Error::BadVersion)
        );
    }
}
