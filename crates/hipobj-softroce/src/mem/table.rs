//! The memory regions of a device and the checks every access passes.

use hipobj_platform::{AccessFlags, MemRegion};

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No live region has this key (never registered, or deregistered).
    #[error("no memory region with this key")]
    BadKey,
    /// The region belongs to another protection domain.
    #[error("memory region is in another protection domain")]
    WrongPd,
    /// The range does not lie inside the region.
    #[error("range outside the memory region")]
    Bounds,
    /// The region does not grant the access.
    #[error("memory region lacks the access right")]
    Rights,
}

/// One registered region.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    /// The memory.
    pub region: MemRegion,
    /// The address peers and scatter/gather entries use for the first byte.
    pub iova: u64,
    /// Rights granted.
    pub access: AccessFlags,
    /// The protection domain.
    pub pd: u32,
}

/// The MR table. A key is `index << 8 | generation`: reusing a slot bumps the
/// generation, so a key that outlived its region finds nothing.
#[derive(Debug, Default)]
pub struct MrTable {
    slots: Vec<(u8, Option<Mr>)>,
    free: Vec<usize>,
}

impl MrTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a region and returns its key (used as both lkey and rkey).
    pub fn register(&mut self, mr: Mr) -> u32 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(mr);
        ((index as u32) << 8) | u32::from(slot.0)
    }

    /// Deregisters the region with this key; later accesses find nothing.
    /// Returns whether it existed.
    pub fn deregister(&mut self, key: u32) -> bool {
        let index = (key >> 8) as usize;
        match self.slots.get_mut(index) {
            Some((generation, mr @ Some(_))) if u32::from(*generation) == key & 0xff => {
                *mr = None;
                self.free.push(index);
                true
            }
            _ => false,
        }
    }

    /// The live region with this key.
    pub fn get(&self, key: u32) -> Option<&Mr> {
        match self.slots.get((key >> 8) as usize) {
            Some((generation, Some(mr))) if u32::from(*generation) == key & 0xff => Some(mr),
            _ => None,
        }
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks an access of `len` bytes at address `va` through `key` from a
    /// QP of protection domain `pd` that needs the rights `need`, and returns
    /// the memory to touch. A zero-length access needs a live key in the PD
    /// but may sit anywhere inside or at the end of the region.
    pub fn check(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<MemRegion, AccessError> {
        let mr = self.get(key).ok_or(AccessError::BadKey)?;
        if mr.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::Rights);
        }
        let offset = va.checked_sub(mr.iova).ok_or(AccessError::Bounds)?;
        let offset = usize::try_from(offset).map_err(|_| AccessError::Bounds)?;
        mr.region.slice(offset, len).ok_or(AccessError::Bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::HostBuffer;

    fn mr(buf: &HostBuffer, access: AccessFlags, pd: u32) -> Mr {
        Mr {
            region: buf.region(),
            iova: buf.addr(),
            access,
            pd,
        }
    }

    #[test]
    fn checks_key_pd_bounds_and_rights() {
        let buf = HostBuffer::new(100);
        let mut t = MrTable::new();
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let key = t.register(mr(&buf, rw, 1));
        let base = buf.addr();
        assert!(t.check(key, 1, base, 100, AccessFlags::REMOTE_WRITE).is_ok());
        assert_eq!(
            t.check(key, 1, base + 10, 10, rw).map(|r| r.addr() as u64),
            Ok(base + 10)
        );
        assert_eq!(t.check(key, 1, base + 91, 10, rw), Err(AccessError::Bounds));
        assert_eq!(t.check(key, 1, base - 1, 1, rw), Err(AccessError::Bounds));
        assert_eq!(t.check(key, 1, u64::MAX, 2, rw), Err(AccessError::Bounds));
        assert!(t.check(key, 1, base + 100, 0, rw).is_ok());
        assert_eq!(t.check(key, 2, base, 1, rw), Err(AccessError::WrongPd));
        assert_eq!(
            t.check(key, 1, base, 1, AccessFlags::REMOTE_READ),
            Err(AccessError::Rights)
        );
        assert_eq!(t.check(key ^ 0x100, 1, base, 1, rw), Err(AccessError::BadKey));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_deregistered_key_finds_nothing_even_after_slot_reuse() {
        let buf = HostBuffer::new(10);
        let mut t = MrTable::new();
        let old = t.register(mr(&buf, AccessFlags::REMOTE_READ, 1));
        assert!(t.deregister(old));
        assert!(!t.deregister(old));
        let new = t.register(mr(&buf, AccessFlags::REMOTE_READ, 1));
        assert_ne!(old, new);
        assert_eq!(old >> 8, new >> 8, "slot reused");
        assert_eq!(
            t.check(old, 1, buf.addr(), 1, AccessFlags::REMOTE_READ),
            Err(AccessError::BadKey)
        );
        assert!(t.get(new).is_some());
        assert!(!t.is_empty());
    }
}
