//! Raw memory handed to a device.
//!
//! A NIC reads and writes registered memory behind the program's back, like a
//! DMA engine. [`MemRegion`] is the promise that makes this sound: whoever
//! builds one vouches that the range stays allocated until every memory region
//! (MR) registered over it has been dropped. It is built in exactly two places:
//! the C ABI (where hipobj.h states that promise for the application) and the
//! safe Rust API (which keeps the buffer borrowed for as long as it is
//! registered).
#![allow(unsafe_code)]

use std::fmt;

/// A range of process memory that a device may read and write at any time
/// until the registrations over it are released.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemRegion {
    addr: usize,
    len: usize,
}

impl MemRegion {
    /// Describes `len` bytes at `addr`.
    ///
    /// # Safety
    ///
    /// The bytes `addr .. addr + len` must stay allocated, and must not be
    /// handed to the allocator, until every memory region registered over this
    /// range has been dropped. While a registration exists the device may
    /// write the range at any moment, so the caller must treat it the way it
    /// would treat memory shared with another process. `addr + len` must not
    /// overflow.
    pub const unsafe fn new(addr: usize, len: usize) -> Self {
        Self { addr, len }
    }

    /// Describes memory that lives for the rest of the program.
    pub fn from_static(buf: &'static mut [u8]) -> Self {
        Self {
            addr: buf.as_mut_ptr() as usize,
            len: buf.len(),
        }
    }

    /// The first byte's address.
    pub const fn addr(&self) -> usize {
        self.addr
    }

    /// The length in bytes.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address one past the last byte.
    pub const fn end(&self) -> usize {
        self.addr + self.len
    }

    /// Whether `[addr, addr + len)` lies inside this region.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr && len <= self.len && addr - self.addr <= self.len - len
    }

    /// The sub-range `[offset, offset + len)` of this region, if it lies inside.
    pub fn slice(&self, offset: usize, len: usize) -> Option<Self> {
        (offset <= self.len && len <= self.len - offset).then(|| Self {
            addr: self.addr + offset,
            len,
        })
    }
}

impl fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemRegion({:#x}+{})", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_and_slice_do_not_overflow() {
        // SAFETY: nothing is registered over this region; it is only measured.
        let r = unsafe { MemRegion::new(usize::MAX - 16, 16) };
        assert!(r.contains(usize::MAX - 16, 16));
        assert!(!r.contains(usize::MAX - 15, 16));
        assert!(!r.contains(usize::MAX - 17, 1));
        assert_eq!(r.slice(8, 8).map(|s| s.addr()), Some(usize::MAX - 8));
        assert!(r.slice(9, 8).is_none());
        assert!(r.slice(usize::MAX, 1).is_none());
    }
}
