//! RoCEv2 on the wire: typed, length-checked views over datagram bytes.
//!
//! A RoCEv2 packet is the payload of a UDP datagram sent to port 4791:
//!
//! ```text
//! | BTH 12 | RETH 16? | AETH 4? | ImmDt 4? | payload | pad 0..3 | ICRC 4 |
//! ```
//!
//! The opcode in the BTH decides which extended headers follow
//! ([`Opcode::layout`]). Each header has two layers, as in smoltcp:
//!
//! * the *packet layer*, a view `Xxx<T: AsRef<[u8]>>` over borrowed bytes with
//!   a private table of field byte ranges. `new_unchecked` wraps any buffer;
//!   `new_checked` also calls `check_len`. **Once `check_len` returned `Ok`,
//!   no accessor or setter panics.** Untrusted input must go through
//!   `new_checked`; emission uses `new_unchecked` on a buffer of exactly
//!   `XxxRepr::buffer_len()` bytes, which cannot panic either.
//! * the *representation layer*, a plain value `XxxRepr` with `parse` (never
//!   panics after a successful check) and `emit` (never panics into a buffer
//!   of `buffer_len()` bytes).
//!
//! [`packet::Packet::parse`] combines them for a whole datagram: it checks
//! the lengths, the opcode, the pad and the ICRC ([`icrc`]) and hands back the
//! headers and a borrowed payload. It never panics on any input; a fuzzer can
//! call it directly.

pub mod aeth;
pub mod bth;
pub mod icrc;
pub mod immdt;
pub mod opcode;
pub mod packet;
pub mod reth;

pub use aeth::{Aeth, AethRepr, Syndrome};
pub use bth::{Bth, BthRepr};
pub use icrc::PseudoHeader;
pub use immdt::ImmDt;
pub use opcode::{Layout, Opcode};
pub use packet::{Headers, Packet};
pub use reth::{Reth, RethRepr};

/// The UDP port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;

/// Why a datagram is not a packet this NIC accepts. Each variant has its own
/// drop counter in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// Shorter than the headers its opcode needs, plus pad and ICRC.
    #[error("datagram too short for its headers")]
    Truncated,
    /// Longer than the largest packet the NIC accepts (4096 bytes of payload).
    #[error("datagram longer than the largest packet")]
    Oversized,
    /// The opcode is not an RC opcode this NIC implements.
    #[error("unsupported opcode")]
    BadOpcode,
    /// The BTH transport header version is not 0.
    #[error("unsupported BTH version")]
    BadVersion,
    /// The pad count does not make the payload end on a 4-byte boundary, or
    /// the packet length is not a multiple of 4.
    #[error("bad pad count or unaligned length")]
    BadPad,
    /// The invariant CRC does not match the packet.
    #[error("ICRC mismatch")]
    BadIcrc,
}

/// The result of parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// The largest payload one packet carries (path MTU 4096).
pub const MAX_PAYLOAD: usize = 4096;

/// The largest RoCE packet this NIC accepts: BTH, RETH, ImmDt, the largest
/// payload and the ICRC. Buffers of this size hold any packet.
pub const MAX_PACKET: usize =
    bth::HEADER_LEN + reth::HEADER_LEN + immdt::HEADER_LEN + MAX_PAYLOAD + icrc::LEN;

/// 24-bit packet sequence number arithmetic, modulo 2^24.
pub mod psn {
    /// Mask of the 24 PSN bits.
    pub const MASK: u32 = 0x00ff_ffff;

    /// `a + n` modulo 2^24.
    pub const fn add(a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & MASK
    }

    /// `a - b` modulo 2^24: how far `a` lies ahead of `b`.
    pub const fn diff(a: u32, b: u32) -> u32 {
        a.wrapping_sub(b) & MASK
    }

    /// Whether `a` is before `b` in the half-space sense of the spec: `b` lies
    /// less than 2^23 ahead of `a`.
    pub const fn lt(a: u32, b: u32) -> bool {
        let d = diff(b, a);
        d != 0 && d < (1 << 23)
    }

    /// `a` before or equal to `b`.
    pub const fn le(a: u32, b: u32) -> bool {
        a & MASK == b & MASK || lt(a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::psn;

    #[test]
    fn psn_wraps() {
        assert_eq!(psn::add(0xff_ffff, 1), 0);
        assert_eq!(psn::diff(0, 0xff_ffff), 1);
        assert!(psn::lt(0xff_fffe, 3));
        assert!(!psn::lt(3, 0xff_fffe));
        assert!(psn::le(5, 5));
        assert!(!psn::lt(5, 5));
        // Exactly half the space away is not "before".
        assert!(!psn::lt(0, 1 << 23));
    }
}
