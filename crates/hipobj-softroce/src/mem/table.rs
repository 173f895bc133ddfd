//! The memory regions and memory windows of a device, and the checks every
//! access passes.
//!
//! Keys are `index << 8 | key byte`, and both parts are drawn at random: a
//! key reveals nothing about the keys of other regions (registering a
//! buffer twice gives two unrelated keys), and a key that outlived its
//! object finds nothing. A type-2 window keeps its index for life; each bind
//! draws a new key byte that differs from the previous one.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use hipobj_platform::{AccessFlags, MemRegion};

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No live region or bound window has this key (never registered,
    /// deregistered, invalidated, or a window key used as a local key).
    #[error("no memory region with this key")]
    BadKey,
    /// The region belongs to another protection domain.
    #[error("memory region is in another protection domain")]
    WrongPd,
    /// The range does not lie inside the region or window.
    #[error("range outside the memory region")]
    Bounds,
    /// The region or window does not grant the access.
    #[error("memory region lacks the access right")]
    Rights,
    /// A type-2 window used through a QP other than the one that bound it.
    #[error("memory window is bound to another queue pair")]
    WrongQp,
}

/// Why a memory-window operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// No window with this key or index.
    #[error("no memory window with this key")]
    NoWindow,
    /// The window or region belongs to another protection domain.
    #[error("memory window or region is in another protection domain")]
    WrongPd,
    /// The window is bound already (a type-2 window binds only when free).
    #[error("memory window is bound already")]
    Bound,
    /// The window is bound to another QP (invalidate).
    #[error("memory window is bound to another queue pair")]
    WrongQp,
    /// No live region with this key, or a region without `MW_BIND`.
    #[error("memory region missing or registered without MW_BIND")]
    BadRegion,
    /// The range lies outside the region.
    #[error("range outside the memory region")]
    Bounds,
    /// Rights other than remote read and write, or remote write over a
    /// region without local write.
    #[error("rights a window cannot grant over this region")]
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

/// What a bound window grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The region's key.
    pub mr_key: u32,
    /// The QP that bound it: the only one its key works through.
    pub qpn: u32,
    /// First byte granted.
    pub va: u64,
    /// Bytes granted.
    pub len: u64,
    /// Remote rights granted.
    pub access: AccessFlags,
}

/// One type-2 memory window.
#[derive(Clone, Copy, Debug)]
struct Mw {
    pd: u32,
    /// The key byte of the latest bind posted (the next bind differs from it).
    posted: u8,
    binding: Option<Binding>,
}

#[derive(Clone, Copy, Debug)]
enum Object {
    Mr(Mr),
    Mw(Mw),
}

/// Unpredictable numbers: SipHash under the process's random keys over a
/// counter (std's `RandomState`, seeded from the operating system).
#[derive(Debug)]
struct KeyGen {
    state: std::collections::hash_map::RandomState,
    counter: u64,
}

impl KeyGen {
    fn new() -> Self {
        Self {
            state: std::collections::hash_map::RandomState::new(),
            counter: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.counter = self.counter.wrapping_add(1);
        let mut h = self.state.build_hasher();
        h.write_u64(self.counter);
        h.finish()
    }

    /// A key byte other than `not`.
    fn byte_other_than(&mut self, not: u8) -> u8 {
        loop {
            let b = self.next() as u8;
            if b != not {
                return b;
            }
        }
    }
}

/// The memory regions and windows of a device.
#[derive(Debug)]
pub struct MrTable {
    /// By index (the key's upper 24 bits): the key byte and the object.
    slots: HashMap<u32, (u8, Object)>,
    mrs: usize,
    keys: KeyGen,
}

impl Default for MrTable {
    fn default() -> Self {
        Self::new()
    }
}

const INDEX_MASK: u32 = 0x00ff_ffff;

impl MrTable {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            slots: HashMap::new(),
            mrs: 0,
            keys: KeyGen::new(),
        }
    }

    fn insert(&mut self, object: Object) -> u32 {
        loop {
            let r = self.keys.next();
            let index = (r as u32 >> 8) & INDEX_MASK;
            if index == 0 || self.slots.contains_key(&index) {
                continue;
            }
            let byte = r as u8;
            self.slots.insert(index, (byte, object));
            return index << 8 | u32::from(byte);
        }
    }

    fn entry(&self, key: u32) -> Option<&Object> {
        match self.slots.get(&(key >> 8)) {
            Some((byte, object)) if *byte == key as u8 => Some(object),
            _ => None,
        }
    }

    /// Registers a region and returns its key (used as both lkey and rkey).
    pub fn register(&mut self, mr: Mr) -> u32 {
        self.mrs += 1;
        self.insert(Object::Mr(mr))
    }

    /// Deregisters the region with this key; later accesses find nothing,
    /// and every window bound over it is unbound. Returns whether it existed.
    pub fn deregister(&mut self, key: u32) -> bool {
        if !matches!(self.entry(key), Some(Object::Mr(_))) {
            return false;
        }
        self.slots.remove(&(key >> 8));
        self.mrs -= 1;
        for (_, object) in self.slots.values_mut() {
            if let Object::Mw(mw) = object
                && mw.binding.is_some_and(|b| b.mr_key == key)
            {
                mw.binding = None;
            }
        }
        true
    }

    /// The live region with this key.
    pub fn get(&self, key: u32) -> Option<&Mr> {
        match self.entry(key) {
            Some(Object::Mr(mr)) => Some(mr),
            _ => None,
        }
    }

    /// Number of live regions.
    pub fn len(&self) -> usize {
        self.mrs
    }

    /// Whether no region is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks an access of `len` bytes at address `va` through the region
    /// key `key` from a QP of protection domain `pd` that needs the rights
    /// `need`, and returns the memory to touch. A zero-length access needs a
    /// live key in the PD but may sit anywhere inside or at the end of the
    /// region. Window keys are refused: they are for peers only.
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

    /// Checks a peer's access through `key` arriving on QP `qpn` (of
    /// protection domain `pd`): a region key is checked as [`MrTable::check`]
    /// does; a window key must belong to a window bound through this very
    /// QP, and the range and rights must lie inside what the bind granted,
    /// over a region that is still registered.
    pub fn check_remote(
        &self,
        key: u32,
        pd: u32,
        qpn: u32,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<MemRegion, AccessError> {
        let mw = match self.entry(key) {
            None => return Err(AccessError::BadKey),
            Some(Object::Mr(_)) => return self.check(key, pd, va, len, need),
            Some(Object::Mw(mw)) => mw,
        };
        let b = mw.binding.ok_or(AccessError::BadKey)?;
        if mw.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if b.qpn != qpn {
            return Err(AccessError::WrongQp);
        }
        if !b.access.contains(need) {
            return Err(AccessError::Rights);
        }
        let end = va.checked_add(len as u64).ok_or(AccessError::Bounds)?;
        if va < b.va || end > b.va.saturating_add(b.len) {
            return Err(AccessError::Bounds);
        }
        // The bind checked the region's rights; what is left is whether it
        // is still there.
        let mr = self.get(b.mr_key).ok_or(AccessError::BadKey)?;
        let offset = va.checked_sub(mr.iova).ok_or(AccessError::Bounds)?;
        let offset = usize::try_from(offset).map_err(|_| AccessError::Bounds)?;
        mr.region.slice(offset, len).ok_or(AccessError::Bounds)
    }

    /// Allocates an unbound type-2 window in protection domain `pd` and
    /// returns its first key (which grants nothing).
    pub fn alloc_window(&mut self, pd: u32) -> u32 {
        let key = self.insert(Object::Mw(Mw {
            pd,
            posted: 0,
            binding: None,
        }));
        if let Some((_, Object::Mw(mw))) = self.slots.get_mut(&(key >> 8)) {
            mw.posted = key as u8;
        }
        key
    }

    /// Deallocates the window with this index (`key >> 8` of any of its
    /// keys): every key it had finds nothing from now on.
    pub fn dealloc_window(&mut self, index: u32) -> bool {
        match self.slots.get(&index) {
            Some((_, Object::Mw(_))) => self.slots.remove(&index).is_some(),
            _ => false,
        }
    }

    /// Picks the key of the next bind of the window with this index: same
    /// index, and `chosen`'s key byte if the caller chose one (its index must
    /// match), else a fresh random key byte that differs from the last one
    /// posted.
    pub fn next_window_key(&mut self, index: u32, chosen: Option<u32>) -> Result<u32, WindowError> {
        let Some((_, Object::Mw(mw))) = self.slots.get(&index) else {
            return Err(WindowError::NoWindow);
        };
        let byte = match chosen {
            Some(k) if k >> 8 == index => k as u8,
            Some(_) => return Err(WindowError::NoWindow),
            None => self.keys.byte_other_than(mw.posted),
        };
        if let Some((_, Object::Mw(mw))) = self.slots.get_mut(&index) {
            mw.posted = byte;
        }
        Ok(index << 8 | u32::from(byte))
    }

    /// Binds the window `new_key` names (its index) as `binding` says, from
    /// a QP of protection domain `pd`; from now on `new_key` is the window's
    /// key. The window must be free, the region alive, in the same domain,
    /// registered with `MW_BIND`, and hold the range; remote write needs the
    /// region's local write.
    pub fn bind_window(&mut self, new_key: u32, pd: u32, binding: Binding) -> Result<(), WindowError> {
        let mr = *self.get(binding.mr_key).ok_or(WindowError::BadRegion)?;
        let Some((byte, Object::Mw(mw))) = self.slots.get_mut(&(new_key >> 8)) else {
            return Err(WindowError::NoWindow);
        };
        if mw.pd != pd || mr.pd != pd {
            return Err(WindowError::WrongPd);
        }
        if mw.binding.is_some() {
            return Err(WindowError::Bound);
        }
        if !mr.access.contains(AccessFlags::MW_BIND) {
            return Err(WindowError::BadRegion);
        }
        let remote = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        if binding.access.0 & !remote.0 != 0
            || (binding.access.contains(AccessFlags::REMOTE_WRITE)
                && !mr.access.contains(AccessFlags::LOCAL_WRITE))
        {
            return Err(WindowError::Rights);
        }
        let end = binding.va.checked_add(binding.len).ok_or(WindowError::Bounds)?;
        if binding.va < mr.iova || end > mr.iova.saturating_add(mr.region.len() as u64) {
            return Err(WindowError::Bounds);
        }
        *byte = new_key as u8;
        mw.binding = Some(binding);
        Ok(())
    }

    /// Invalidates the window bound under `key` through QP `qpn`: the key
    /// grants nothing from now on, and the window may be bound again.
    pub fn invalidate_window(&mut self, key: u32, qpn: u32) -> Result<(), WindowError> {
        match self.slots.get_mut(&(key >> 8)) {
            Some((byte, Object::Mw(mw))) if *byte == key as u8 => match mw.binding {
                Some(b) if b.qpn == qpn => {
                    mw.binding = None;
                    Ok(())
                }
                Some(_) => Err(WindowError::WrongQp),
                None => Err(WindowError::NoWindow),
            },
            _ => Err(WindowError::NoWindow),
        }
    }

    /// Unbinds every window bound through QP `qpn` (it was destroyed).
    pub fn unbind_qp(&mut self, qpn: u32) {
        for (_, object) in self.slots.values_mut() {
            if let Object::Mw(mw) = object
                && mw.binding.is_some_and(|b| b.qpn == qpn)
            {
                mw.binding = None;
            }
        }
    }

    /// What the window with this key grants now, if it is bound.
    pub fn window_binding(&self, key: u32) -> Option<Binding> {
        match self.entry(key) {
            Some(Object::Mw(mw)) => mw.binding,
            _ => None,
        }
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
        assert_eq!(t.check(key ^ 0x1, 1, base, 1, rw), Err(AccessError::BadKey));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_deregistered_key_finds_nothing() {
        let buf = HostBuffer::new(10);
        let mut t = MrTable::new();
        let old = t.register(mr(&buf, AccessFlags::REMOTE_READ, 1));
        assert!(t.deregister(old));
        assert!(!t.deregister(old));
        let new = t.register(mr(&buf, AccessFlags::REMOTE_READ, 1));
        assert_ne!(old, new);
        assert_eq!(
            t.check(old, 1, buf.addr(), 1, AccessFlags::REMOTE_READ),
            Err(AccessError::BadKey)
        );
        assert!(t.get(new).is_some());
        assert!(!t.is_empty());
    }

    #[test]
    fn keys_of_consecutive_registrations_are_unrelated() {
        // Registering one buffer twice (a PUT and a GET registration) must not
        // let one key be computed from the other.
        let buf = HostBuffer::new(10);
        let mut t = MrTable::new();
        let keys: Vec<u32> = (0..64)
            .map(|_| t.register(mr(&buf, AccessFlags::REMOTE_READ, 1)))
            .collect();
        let deltas: std::collections::HashSet<u32> =
            keys.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(deltas.len() > 60, "keys follow a pattern: {keys:x?}");
        assert!(keys.iter().all(|&k| k >> 8 != 0));
    }
}
