//! Immediate data: 4 bytes the requester hands to the responder's completion.

use super::{Error, Result};

/// Bytes of immediate data.
pub const HEADER_LEN: usize = 4;

/// A read/write view of an ImmDt header.
#[derive(Debug, Clone)]
pub struct ImmDt<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmDt<T> {
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

    /// Whether the buffer holds the whole header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The immediate value. Verbs hands it to the application in network
    /// byte order; this NIC treats it as a big-endian number on the wire, so
    /// the value posted is the value completed.
    pub fn imm(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate value.
    pub fn set_imm(&mut self, imm: u32) {
        self.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&imm.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_len() {
        let mut buf = [0u8; 4];
        ImmDt::new_unchecked(&mut buf[..]).set_imm(0xdead_beef);
        assert_eq!(buf, [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(ImmDt::new_checked(&buf[..]).map(|i| i.imm()), Ok(0xdead_beef));
        assert_eq!(ImmDt::new_checked(&buf[..3]).err(), Some(Error::Truncated));
    }
}
