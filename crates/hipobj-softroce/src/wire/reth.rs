//! The RDMA Extended Transport Header: where a WRITE or READ goes.
//!
//! ```text
//! 0..8    virtual address
//! 8..12   R_Key
//! 12..16  DMA length
//! ```

use super::{Error, Result};

mod field {
    use core::ops::Range;
    pub(super) const VA: Range<usize> = 0..8;
    pub(super) const RKEY: Range<usize> = 8..12;
    pub(super) const DMA_LEN: Range<usize> = 12..16;
}

/// Bytes in a RETH.
pub const HEADER_LEN: usize = 16;

/// A read/write view of a RETH.
#[derive(Debug, Clone)]
pub struct Reth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Reth<T> {
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

    /// Whether the buffer holds a whole RETH.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The remote virtual address.
    pub fn va(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buffer.as_ref()[field::VA]);
        u64::from_be_bytes(b)
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::RKEY]);
        u32::from_be_bytes(b)
    }

    /// The length of the whole message in bytes.
    pub fn dma_len(&self) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::DMA_LEN]);
        u32::from_be_bytes(b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, va: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&va.to_be_bytes());
    }

    /// Sets the remote key.
    pub fn set_rkey(&mut self, rkey: u32) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&rkey.to_be_bytes());
    }

    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, len: u32) {
        self.buffer.as_mut()[field::DMA_LEN].copy_from_slice(&len.to_be_bytes());
    }
}

/// The meaning of a RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Message length.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(reth: &Reth<T>) -> Result<Self> {
        reth.check_len()?;
        Ok(Self {
            va: reth.va(),
            rkey: reth.rkey(),
            dma_len: reth.dma_len(),
        })
    }

    /// Bytes [`RethRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, reth: &mut Reth<T>) {
        reth.set_va(self.va);
        reth.set_rkey(self.rkey);
        reth.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x78, 0x9a, 0x00, 0x00, 0x01, 0x02, 0x00, 0x10, 0x00, 0x00,
    ];

    #[test]
    fn round_trip() {
        let r = RethRepr::parse(&Reth::new_checked(&BYTES[..]).expect("whole")).expect("parses");
        assert_eq!(
            r,
            RethRepr {
                va: 0x7f12_3456_789a,
                rkey: 0x102,
                dma_len: 0x10_0000
            }
        );
        let mut buf = [0u8; HEADER_LEN];
        r.emit(&mut Reth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(Reth::new_checked(&BYTES[..15]).err(), Some(Error::Truncated));
    }
}
