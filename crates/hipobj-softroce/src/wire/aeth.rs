//! The ACK Extended Transport Header: a syndrome and the responder's MSN.
//!
//! ```text
//! 0       syndrome: 000ccccc ACK (c = credits), 001ttttt RNR NAK (t = timer),
//!                   011nnnnn NAK (n = code)
//! 1..4    MSN (24 bits)
//! ```

use super::{Error, Result};

mod field {
    use core::ops::Range;
    pub(super) const SYNDROME: usize = 0;
    pub(super) const MSN: Range<usize> = 1..4;
}

/// Bytes in an AETH.
pub const HEADER_LEN: usize = 4;

/// Credit count meaning "no end-to-end flow control credits advertised".
pub const CREDITS_INVALID: u8 = 0x1f;

/// What an ACK or NAK says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count.
    Ack {
        /// End-to-end credits (0x1f: not advertised).
        credits: u8,
    },
    /// Receiver not ready: retry after the time of this timer code.
    RnrNak {
        /// Timer code 0..31 (IBA table "RNR NAK timer field encoding").
        timer: u8,
    },
    /// PSN sequence error: the requester resends from the NAK's PSN.
    NakSequence,
    /// Invalid request (bad opcode sequence, length, queue overflow).
    NakInvalidRequest,
    /// Remote access error (R_Key, bounds or access rights).
    NakRemoteAccess,
    /// Remote operational error.
    NakRemoteOperational,
    /// Invalid RD request.
    NakInvalidRdRequest,
    /// A reserved encoding, kept so it round-trips.
    Reserved(u8),
}

impl Syndrome {
    /// The syndrome with this byte value.
    pub const fn from_u8(v: u8) -> Self {
        match v >> 5 {
            0b000 => Self::Ack { credits: v & 0x1f },
            0b001 => Self::RnrNak { timer: v & 0x1f },
            0b011 => match v & 0x1f {
                0 => Self::NakSequence,
                1 => Self::NakInvalidRequest,
                2 => Self::NakRemoteAccess,
                3 => Self::NakRemoteOperational,
                4 => Self::NakInvalidRdRequest,
                _ => Self::Reserved(v),
            },
            _ => Self::Reserved(v),
        }
    }

    /// The byte value.
    pub const fn to_u8(self) -> u8 {
        match self {
            Self::Ack { credits } => credits & 0x1f,
            Self::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Self::NakSequence => 0x60,
            Self::NakInvalidRequest => 0x61,
            Self::NakRemoteAccess => 0x62,
            Self::NakRemoteOperational => 0x63,
            Self::NakInvalidRdRequest => 0x64,
            Self::Reserved(v) => v,
        }
    }
}

/// A read/write view of an AETH.
#[derive(Debug, Clone)]
pub struct Aeth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Aeth<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking its length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let r = Self::new_unchecked(buffer);
        r.check_len()?;
        Ok(r)
    }

    /// Whether the buffer holds a whole AETH.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_u8(self.buffer.as_ref()[field::SYNDROME])
    }

    /// The message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::MSN];
        (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.buffer.as_mut()[field::SYNDROME] = s.to_u8();
    }

    /// Sets the MSN (low 24 bits).
    pub fn set_msn(&mut self, msn: u32) {
        self.buffer.as_mut()[field::MSN].copy_from_slice(&msn.to_be_bytes()[1..]);
    }
}

/// The meaning of an AETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AethRepr {
    /// ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// Message sequence number.
    pub msn: u32,
}

impl AethRepr {
    /// Reads an AETH.
    pub fn parse<T: AsRef<[u8]>>(aeth: &Aeth<T>) -> Result<Self> {
        aeth.check_len()?;
        Ok(Self {
            syndrome: aeth.syndrome(),
            msn: aeth.msn(),
        })
    }

    /// Bytes [`AethRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, aeth: &mut Aeth<T>) {
        aeth.set_syndrome(self.syndrome);
        aeth.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(Syndrome::from_u8(v).to_u8(), v);
        }
        assert_eq!(Syndrome::from_u8(0x1f), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::from_u8(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(Syndrome::from_u8(0x62), Syndrome::NakRemoteAccess);
        assert_eq!(Syndrome::from_u8(0x40), Syndrome::Reserved(0x40));
    }

    #[test]
    fn round_trip_and_len() {
        let bytes = [0x60, 0x01, 0x02, 0x03];
        let a = AethRepr::parse(&Aeth::new_checked(&bytes[..]).expect("whole")).expect("parses");
        assert_eq!(
            a,
            AethRepr {
                syndrome: Syndrome::NakSequence,
                msn: 0x010203
            }
        );
        let mut buf = [0u8; 4];
        a.emit(&mut Aeth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
        assert_eq!(Aeth::new_checked(&bytes[..3]).err(), Some(Error::Truncated));
    }
}
