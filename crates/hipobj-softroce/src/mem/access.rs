//! Raw reads and writes of registered memory, the NIC's DMA.
//!
//! Registered memory is shared with the application the way memory is shared
//! with another process: the NIC may write it at any moment while a
//! registration exists ([`MemRegion`]'s promise). The copies here therefore go
//! through raw pointers and never form references to that memory.
#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use hipobj_platform::MemRegion;

/// Copies `src` to the start of `dst`. Returns `false`, copying nothing, if
/// `src` is longer than `dst`.
///
/// `dst` must come from a check against the MR table under the engine lock
/// (the table only hands out ranges inside live registrations).
pub(crate) fn write(dst: MemRegion, src: &[u8]) -> bool {
    if src.len() > dst.len() {
        return false;
    }
    // SAFETY: `dst` lies inside a live registration (checked by the caller
    // under the engine lock, which deregistration also takes), so by
    // MemRegion's contract the bytes are allocated and may be written by the
    // device at any time. `src` is a Rust slice of at most `dst.len()` bytes
    // in the NIC's own buffers, so the ranges cannot overlap.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.addr() as *mut u8, src.len()) };
    true
}

/// Copies the start of `src` into `dst`. Returns `false`, copying nothing, if
/// `dst` is longer than `src`.
///
/// `src` must come from a check against the MR table under the engine lock.
pub(crate) fn read(src: MemRegion, dst: &mut [u8]) -> bool {
    if dst.len() > src.len() {
        return false;
    }
    // SAFETY: as in `write`: `src` is inside a live registration, so its
    // bytes are allocated; `dst` is the NIC's own buffer and does not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src.addr() as *const u8, dst.as_mut_ptr(), dst.len()) };
    true
}

const PAGE: usize = 4096;

/// Free allocations, by (address, capacity). Never handed back to the
/// allocator.
static POOL: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Page-aligned host memory that may be registered safely: its allocation is
/// never returned to the allocator, only to a pool for reuse by later
/// `HostBuffer`s, so a registration that outlives the buffer can never
/// write freed memory (it can only scribble on a later buffer, as a stale
/// RDMA key would on real hardware).
///
/// The bytes are read and written by copying ([`HostBuffer::read`],
/// [`HostBuffer::write`]), never through references, because a NIC may
/// write them at any time.
pub struct HostBuffer {
    addr: usize,
    len: usize,
    cap: usize,
}

impl HostBuffer {
    /// A zeroed buffer of `len` bytes (at least one page is allocated).
    ///
    /// # Panics
    ///
    /// When the allocator fails, as `Vec` does.
    pub fn new(len: usize) -> Self {
        let reused = {
            let mut pool = POOL.lock().unwrap_or_else(PoisonError::into_inner);
            let best = pool
                .iter()
                .enumerate()
                .filter(|(_, (_, cap))| *cap >= len && *cap <= len.max(PAGE).saturating_mul(2))
                .min_by_key(|(_, (_, cap))| *cap)
                .map(|(i, _)| i);
            best.map(|i| pool.swap_remove(i))
        };
        let (addr, cap) = match reused {
            Some((addr, cap)) => {
                // SAFETY: the pooled allocation of `cap >= len` bytes is live
                // (never freed) and no HostBuffer owns it now.
                unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
                (addr, cap)
            }
            None => {
                let cap = len.max(1).div_ceil(PAGE).saturating_mul(PAGE);
                let layout = Layout::from_size_align(cap, PAGE)
                    .unwrap_or_else(|_| panic!("HostBuffer of {len} bytes is too large"));
                // SAFETY: `layout` has a non-zero size.
                let ptr = unsafe { alloc::alloc_zeroed(layout) };
                if ptr.is_null() {
                    alloc::handle_alloc_error(layout);
                }
                (ptr as usize, cap)
            }
        };
        Self { addr, len, cap }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let b = Self::new(bytes.len());
        b.write(0, bytes);
        b
    }

    /// The region to register.
    pub fn region(&self) -> MemRegion {
        // SAFETY: the allocation is never freed (see the type's doc), so the
        // bytes stay allocated for as long as any registration exists.
        unsafe { MemRegion::new(self.addr, self.len) }
    }

    /// The first byte's address.
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` in at `offset`.
    ///
    /// # Panics
    ///
    /// If the range does not lie inside the buffer.
    pub fn write(&self, offset: usize, src: &[u8]) {
        let dst = self
            .region()
            .slice(offset, src.len())
            .unwrap_or_else(|| panic!("write of {} at {offset} outside {} bytes", src.len(), self.len));
        write(dst, src);
    }

    /// Copies out `dst.len()` bytes from `offset`.
    ///
    /// # Panics
    ///
    /// If the range does not lie inside the buffer.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        let src = self
            .region()
            .slice(offset, dst.len())
            .unwrap_or_else(|| panic!("read of {} at {offset} outside {} bytes", dst.len(), self.len));
        read(src, dst);
    }

    /// A copy of the whole buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.read(0, &mut v);
        v
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        POOL.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((self.addr, self.cap));
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({:#x}+{})", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_copy_in_and_out_and_are_reused_zeroed() {
        let b = HostBuffer::from_bytes(b"hello world");
        let mut out = [0u8; 5];
        b.read(6, &mut out);
        assert_eq!(&out, b"world");
        assert_eq!(b.region().len(), 11);
        assert_eq!(b.region().addr() % PAGE, 0);
        drop(b);
        let c = HostBuffer::new(11);
        assert_eq!(c.to_vec(), vec![0; 11]);
    }

    #[test]
    fn copies_refuse_short_regions() {
        let b = HostBuffer::new(8);
        let r = b.region().slice(0, 4).expect("inside");
        assert!(!write(r, &[1; 5]));
        assert!(write(r, &[1; 4]));
        let mut big = [0u8; 5];
        assert!(!read(r, &mut big));
        assert_eq!(b.to_vec(), [1, 1, 1, 1, 0, 0, 0, 0]);
    }
}
