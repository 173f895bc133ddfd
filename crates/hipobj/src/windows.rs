//! The device's memory windows, and the keys transfers grant under
//! (docs/protocol.md §1, "Keys").
//!
//! A type-2 window's key is its index (24 bits, the NIC's choice, fixed for
//! the window's life) and a key byte (8 bits, ours at each bind). One window
//! per connection would give a connection's keys 8 bits of variety, so a key
//! would come back within a few hundred transfers. Instead the device keeps
//! a pool of [`POOL`] unbound windows, and each transfer takes one at
//! random, with a random key byte: about 9 + 8 bits that no earlier key
//! tells. The last [`RECENT`] keys handed out are remembered and never drawn
//! again, so no key comes back within that many transfers on the whole
//! device, let alone on one connection. A window goes back to the pool only
//! once its grant was invalidated; one whose grant could not be ended is
//! deallocated with its connection instead.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, PoisonError};

use hipobj_platform::{MemoryWindow, ProtectionDomain, VerbsError};

/// Unbound windows the pool keeps to choose from.
pub(crate) const POOL: usize = 512;
/// Keys remembered: none of them is drawn again.
pub(crate) const RECENT: usize = 4096;

/// The pool of unbound windows of one protection domain.
#[derive(Debug)]
pub struct Windows {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    free: Vec<Box<dyn MemoryWindow>>,
    recent: VecDeque<u32>,
    recent_set: HashSet<u32>,
    random: Random,
}

/// Unpredictable numbers: SipHash under the process's random keys (std's
/// `RandomState`, seeded from the operating system) over a counter.
#[derive(Debug)]
struct Random {
    state: std::collections::hash_map::RandomState,
    counter: u64,
}

impl Random {
    fn next(&mut self) -> u64 {
        let mut h = self.state.build_hasher();
        // A child forked with a copy of std's per-thread keys draws other
        // numbers than its parent.
        h.write_u32(std::process::id());
        h.write_u64(self.counter);
        self.counter = self.counter.wrapping_add(1);
        h.finish()
    }
}

impl Windows {
    /// Allocates the pool's windows on `pd`. Fails only if not even one can
    /// be allocated.
    pub fn new(pd: &dyn ProtectionDomain) -> Result<Self, VerbsError> {
        let mut free = Vec::with_capacity(POOL);
        for _ in 0..POOL {
            match pd.alloc_mw() {
                Ok(w) => free.push(w),
                Err(e) if free.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(Self {
            inner: Mutex::new(Inner {
                free,
                recent: VecDeque::with_capacity(RECENT),
                recent_set: HashSet::with_capacity(RECENT),
                random: Random {
                    state: std::collections::hash_map::RandomState::new(),
                    counter: 0,
                },
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a window at random and draws the key a transfer grants under:
    /// the window's index and a random key byte other than its current one,
    /// never one of the last [`RECENT`] keys. With the pool empty (every
    /// window held by a transfer), allocates another on `pd`.
    pub fn take(&self, pd: &dyn ProtectionDomain) -> Result<(Box<dyn MemoryWindow>, u32), VerbsError> {
        let mut g = self.lock();
        // Windows held by transfers are replaced, so there are always about
        // POOL to choose from.
        if g.free.len() < POOL {
            match pd.alloc_mw() {
                Ok(w) => g.free.push(w),
                Err(e) if g.free.is_empty() => return Err(e),
                Err(_) => {}
            }
        }
        let inner = &mut *g;
        let mut tries = 0u32;
        let (at, key) = loop {
            let r = inner.random.next();
            let at = (r % inner.free.len() as u64) as usize;
            let current = inner.free[at].rkey();
            let byte = (r >> 32) as u8;
            let key = (current & !0xff) | u32::from(byte);
            tries += 1;
            // With a full pool a draw is refused about once in 30; only a
            // pool the NIC kept small could refuse every draw, and then a
            // recent key is the lesser harm than no transfer.
            if byte != current as u8 && (tries > 256 || !inner.recent_set.contains(&key)) {
                break (at, key);
            }
        };
        if inner.recent.len() == RECENT
            && let Some(old) = inner.recent.pop_front()
        {
            inner.recent_set.remove(&old);
        }
        inner.recent.push_back(key);
        inner.recent_set.insert(key);
        Ok((inner.free.swap_remove(at), key))
    }

    /// Gives back a window whose grant has ended (invalidated, or never
    /// bound).
    pub fn give_back(&self, w: Box<dyn MemoryWindow>) {
        self.lock().free.push(w);
    }

    /// Unbound windows in the pool now.
    pub fn free(&self) -> usize {
        self.lock().free.len()
    }
}
