//! Staging copies that timed out but may still be running.
//!
//! A copy cannot be cancelled: after its deadline it can still read or write
//! the staging buffer whenever the GPU gets to it. So the copy's event and the
//! buffer's entry are kept here: holding the entry keeps the staging buffer
//! allocated and makes deregistration report `Busy`, and calls on the buffer
//! report `Busy` until the copy is seen to have finished. If the instance is
//! destroyed while a copy still runs, its event and staging buffer are leaked
//! on purpose rather than freed under it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hipobj_platform::CopyEvent;

use crate::buffers::BufEntry;

#[derive(Debug, Default)]
struct State {
    copies: Vec<(Arc<BufEntry>, Box<dyn CopyEvent>)>,
    reserved: usize,
}

/// The list of copies that outlived their deadline.
#[derive(Debug, Default)]
pub struct AbandonedCopies {
    state: Mutex<State>,
}

/// Room in the list, reserved before a copy starts so that handing the copy
/// over can never fail.
#[derive(Debug)]
pub struct Slot<'a> {
    list: &'a AbandonedCopies,
    used: bool,
}

impl AbandonedCopies {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves room for one copy.
    pub fn reserve(&self) -> Slot<'_> {
        let mut st = self.lock();
        st.reserved += 1;
        let want = st.copies.len() + st.reserved;
        let extra = want.saturating_sub(st.copies.len());
        st.copies.reserve(extra);
        Slot {
            list: self,
            used: false,
        }
    }

    /// Hands over a copy that timed out, using reserved room (no allocation).
    pub fn add(&self, mut slot: Slot<'_>, entry: Arc<BufEntry>, event: Box<dyn CopyEvent>) {
        slot.used = true;
        let mut st = self.lock();
        st.reserved -= 1;
        st.copies.push((entry, event));
    }

    fn prune(st: &mut State, only: Option<usize>) {
        st.copies.retain(|(entry, event)| {
            if only.is_some_and(|a| a != entry.addr()) {
                return true;
            }
            // A copy whose state cannot be read is treated as still running.
            !matches!(event.is_done(), Ok(true))
        });
    }

    /// Whether a copy of the buffer at `addr` is still running; releases the
    /// finished ones of that buffer.
    pub fn busy(&self, addr: usize) -> bool {
        let mut st = self.lock();
        Self::prune(&mut st, Some(addr));
        st.copies.iter().any(|(e, _)| e.addr() == addr)
    }

    /// Releases every copy that has finished.
    pub fn prune_all(&self) {
        Self::prune(&mut self.lock(), None);
    }

    /// Copies still held.
    pub fn len(&self) -> usize {
        self.lock().copies.len()
    }

    /// Whether no copy is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.used {
            self.list.lock().reserved -= 1;
        }
    }
}

impl Drop for AbandonedCopies {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        Self::prune(st, None);
        for copy in st.copies.drain(..) {
            // Still running: freeing the staging buffer under the GPU's copy
            // engine would corrupt memory, so leak it (and the event).
            std::mem::forget(copy);
        }
    }
}
