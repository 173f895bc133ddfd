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

/// Memory this process owns, registered with a device for as long as it
/// lives: a server's bounce buffer, or a test's. The MR is dropped before the
/// memory under it, so the registration can never outlive the bytes.
///
/// The device may write the bytes at any time while a work request on them
/// is in flight, so they are reached through copies
/// ([`RegisteredBuffer::read_at`], [`RegisteredBuffer::write_at`]), or lent
/// as a slice only to the exclusive owner of a buffer that no peer can
/// write ([`RegisteredBuffer::with_bytes_mut`]), for filling or reading in
/// place between work requests.
#[derive(Debug)]
pub struct RegisteredBuffer {
    // Field order is drop order: deregister first, then free.
    mr: Box<dyn crate::verbs::MemoryRegion>,
    bytes: Box<[std::cell::UnsafeCell<u8>]>,
    access: crate::verbs::AccessFlags,
}

// SAFETY: the bytes are only reached through raw copies, like memory shared
// with a device; the MR handle is Send + Sync itself.
unsafe impl Send for RegisteredBuffer {}
// SAFETY: as above; concurrent copies into overlapping ranges are the
// caller's race to avoid, exactly as with device DMA.
unsafe impl Sync for RegisteredBuffer {}

impl RegisteredBuffer {
    /// Allocates `len` zeroed bytes and registers them on `pd` with `access`.
    pub fn new(
        pd: &dyn crate::verbs::ProtectionDomain,
        len: usize,
        access: crate::verbs::AccessFlags,
    ) -> Result<Self, crate::verbs::VerbsError> {
        let bytes: Box<[std::cell::UnsafeCell<u8>]> =
            (0..len).map(|_| std::cell::UnsafeCell::new(0)).collect();
        // SAFETY: `bytes` is owned by the value returned below and freed
        // only after `mr` is dropped (field order), so the range stays
        // allocated for the whole life of the registration.
        let region = unsafe { MemRegion::new(bytes.as_ptr() as usize, len) };
        let mr = pd.reg_mr(region, access)?;
        Ok(Self { mr, bytes, access })
    }

    /// The registration.
    pub fn mr(&self) -> &dyn crate::verbs::MemoryRegion {
        self.mr.as_ref()
    }

    /// The first byte's address.
    pub fn addr(&self) -> u64 {
        self.bytes.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// A scatter/gather entry for `[offset, offset + len)`, if it lies inside.
    pub fn sge(&self, offset: usize, len: u32) -> Option<crate::verbs::Sge> {
        let end = offset.checked_add(len as usize)?;
        (end <= self.len()).then(|| crate::verbs::Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.mr.lkey(),
        })
    }

    /// Copies bytes out, starting at `offset`; `false` if the range is outside.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(out.len()) else {
            return false;
        };
        if end > self.len() {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked above); the
        // bytes are UnsafeCell, so copying through a raw pointer while
        // shared is allowed.
        unsafe {
            let src = std::cell::UnsafeCell::raw_get(self.bytes.as_ptr().add(offset));
            std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len());
        }
        true
    }

    /// Lends `[offset, offset + len)` to `f` as one mutable slice, so a
    /// caller fills (or reads) the buffer in place instead of through a
    /// scratch copy. `None` if the range is outside, or if the buffer was
    /// registered with remote write or atomic access: a peer could then
    /// change the bytes under the slice at any moment. `&mut self` keeps
    /// every other reference and copy of this program away while `f` runs;
    /// the one writer left is a local work request.
    ///
    /// # Safety
    ///
    /// No work request on this buffer's registration may be in flight on
    /// `[offset, offset + len)` while `f` runs (an RDMA READ landing there,
    /// or a WRITE or SEND reading it): the device would write, or read,
    /// bytes that a `&mut [u8]` holds exclusively.
    pub unsafe fn with_bytes_mut<R>(
        &mut self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        use crate::verbs::AccessFlags;
        if self.access.contains(AccessFlags::REMOTE_WRITE) || self.access.contains(AccessFlags::REMOTE_ATOMIC)
        {
            return None;
        }
        let end = offset.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        // SAFETY: the range is inside the allocation (checked above), and
        // `UnsafeCell<u8>` has the layout of `u8`, so the cells are `len`
        // contiguous bytes. `&mut self` is exclusive, so no other reference
        // to them exists in this program while the slice lives; no peer can
        // write them (no remote access, checked above), and no local work
        // request is in flight on them (this function's safety contract).
        let slice = unsafe {
            std::slice::from_raw_parts_mut(
                std::cell::UnsafeCell::raw_get(self.bytes.as_ptr().add(offset)),
                len,
            )
        };
        Some(f(slice))
    }

    /// Copies bytes in, starting at `offset`; `false` if the range is outside.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len()) else {
            return false;
        };
        if end > self.len() {
            return false;
        }
        // SAFETY: as in `read_at`; UnsafeCell makes writing through a shared
        // reference sound.
        unsafe {
            let dst = std::cell::UnsafeCell::raw_get(self.bytes.as_ptr().add(offset));
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
        }
        true
    }
}
