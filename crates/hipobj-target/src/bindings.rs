//! The bindings: one server QP per (access key, client GID, client QPN),
//! at most `max_bindings` of them, idle ones expiring, and at most one per
//! client QP whatever the key.
//!
//! That last rule is what keeps one client from disturbing another's QP.
//! An RC responder accepts any packet addressed to its QPN from its peer's
//! address; on a server every binding QP shares that address, so a second
//! server QP pointed at a client QP (made for another key's token naming
//! it) could send it requests with the wrong PSN or key and break it. A
//! client QP that another key has bound and used is therefore refused
//! ([`Lookup::Taken`]); one bound but never used (its 409 may have gone to
//! an impostor, or the client died) is replaced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hipobj_platform::{CompletionQueue, Gid, QueuePair};

use crate::lock;

/// Whose binding: the caller's access key and the client QP its token names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BindingKey {
    pub access_key: String,
    pub gid: Gid,
    pub qpn: u32,
}

/// A server QP connected to one client QP.
pub(crate) struct ServerQp {
    // Field order is drop order: the QP before its CQ.
    pub qp: Box<dyn QueuePair>,
    pub cq: Arc<dyn CompletionQueue>,
    pub next_wr: u64,
}

impl std::fmt::Debug for ServerQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerQp")
            .field("qpn", &self.qp.qp_num())
            .finish()
    }
}

#[derive(Debug)]
pub(crate) struct Binding {
    pub qpn: u32,
    pub conn: Mutex<ServerQp>,
    pub last_used: Mutex<Instant>,
    /// Whether a transfer has moved bytes on it. A binding that never did
    /// (a 409 whose client never came back, such as a client that died
    /// mid-transfer and was bound afresh) lasts only [`UNCONFIRMED`].
    pub moved: AtomicBool,
}

/// How long a binding that has moved nothing outlives its 409: a client
/// resends at once, so this only bounds what dead or bogus clients hold.
pub(crate) const UNCONFIRMED: Duration = Duration::from_secs(15);

impl Binding {
    /// Whether the binding has moved bytes or is moving them now: its client
    /// QP is really connected to it.
    fn in_use(self: &Arc<Self>) -> bool {
        self.moved.load(Ordering::Relaxed) || Arc::strong_count(self) > 1
    }

    /// Whether the binding is past its time at `idle` (a binding in use by
    /// a request, more than the map's reference, never is).
    fn expired(self: &Arc<Self>, idle: Duration) -> bool {
        let limit = if self.moved.load(Ordering::Relaxed) {
            idle
        } else {
            idle.min(UNCONFIRMED)
        };
        Arc::strong_count(self) == 1 && lock(&self.last_used).elapsed() >= limit
    }
}

/// What a lookup found.
pub(crate) enum Lookup {
    /// A live binding.
    Bound(Arc<Binding>),
    /// None: room for one is reserved; [`Bindings::insert`] or
    /// [`Bindings::unreserve`] must follow.
    Reserved,
    /// None, and every binding is in use by a transfer.
    Full,
    /// The client QP is bound, and has moved bytes (or is moving them),
    /// for another access key.
    Taken,
}

#[derive(Debug, Default)]
struct State {
    map: HashMap<BindingKey, Arc<Binding>>,
    /// Bindings being created (their QPs are being connected, outside the
    /// lock): they count against the limit, so it is never exceeded.
    reserved: usize,
}

/// The binding table.
#[derive(Debug)]
pub(crate) struct Bindings {
    state: Mutex<State>,
    max: usize,
    idle: Duration,
}

impl Bindings {
    pub(crate) fn new(max: usize, idle: Duration) -> Self {
        Self {
            state: Mutex::new(State::default()),
            max: max.max(1),
            idle,
        }
    }

    /// Live bindings (expired ones are dropped first, so a gauge of this
    /// falls when they expire, not at the next request).
    pub(crate) fn len(&self) -> usize {
        let mut st = lock(&self.state);
        let idle = self.idle;
        st.map.retain(|_, b| !b.expired(idle));
        st.map.len()
    }

    pub(crate) fn clear(&self) {
        lock(&self.state).map.clear();
    }

    /// Finds the caller's binding, or reserves room for a new one, making
    /// room by dropping the least recently used idle binding.
    pub(crate) fn lookup(&self, key: &BindingKey) -> Lookup {
        let mut st = lock(&self.state);
        let idle = self.idle;
        st.map.retain(|_, b| !b.expired(idle));
        if let Some(b) = st.map.get(key) {
            return Lookup::Bound(b.clone());
        }
        let other = st
            .map
            .iter()
            .find(|(k, _)| k.gid == key.gid && k.qpn == key.qpn)
            .map(|(k, b)| (k.clone(), b.in_use()));
        match other {
            Some((_, true)) => return Lookup::Taken,
            Some((k, false)) => {
                st.map.remove(&k);
            }
            None => {}
        }
        while st.map.len() + st.reserved >= self.max {
            let victim = st
                .map
                .iter()
                .filter(|(_, b)| Arc::strong_count(b) == 1)
                .min_by_key(|(_, b)| *lock(&b.last_used))
                .map(|(k, _)| k.clone());
            match victim {
                Some(k) => {
                    st.map.remove(&k);
                }
                None => return Lookup::Full,
            }
        }
        st.reserved += 1;
        Lookup::Reserved
    }

    /// Fills a reservation. A bind for the same client QP under another key
    /// may have finished meanwhile: an unused one gives way; a used one
    /// wins, and this binding is dropped (false).
    pub(crate) fn insert(&self, key: BindingKey, binding: Arc<Binding>) -> bool {
        let mut st = lock(&self.state);
        st.reserved = st.reserved.saturating_sub(1);
        let others: Vec<(BindingKey, bool)> = st
            .map
            .iter()
            .filter(|(k, _)| k.gid == key.gid && k.qpn == key.qpn && k.access_key != key.access_key)
            .map(|(k, b)| (k.clone(), b.in_use()))
            .collect();
        if others.iter().any(|(_, used)| *used) {
            return false;
        }
        for (k, _) in others {
            st.map.remove(&k);
        }
        st.map.insert(key, binding);
        true
    }

    /// Gives a reservation back (connecting the QP failed).
    pub(crate) fn unreserve(&self) {
        let mut st = lock(&self.state);
        st.reserved = st.reserved.saturating_sub(1);
    }

    /// Drops `key`'s binding if it is still the one with server QP `qpn`.
    pub(crate) fn remove(&self, key: &BindingKey, qpn: u32) {
        let mut st = lock(&self.state);
        if st.map.get(key).is_some_and(|b| b.qpn == qpn) {
            st.map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(qpn: u32) -> BindingKey {
        BindingKey {
            access_key: "k".into(),
            gid: Gid::ZERO,
            qpn,
        }
    }

    /// The limit is exact: bindings whose QPs are still being connected
    /// (outside the lock) count, so concurrent binds cannot overshoot it, as
    /// the old check-then-insert did (1030 of 1024 for a moment).
    #[test]
    fn binds_in_progress_count_against_the_limit() {
        let b = Bindings::new(2, Duration::from_secs(60));
        assert!(matches!(b.lookup(&key(2)), Lookup::Reserved));
        assert!(matches!(b.lookup(&key(3)), Lookup::Reserved));
        assert!(
            matches!(b.lookup(&key(4)), Lookup::Full),
            "a third bind started while two are being made"
        );
        b.unreserve();
        assert!(matches!(b.lookup(&key(4)), Lookup::Reserved));
    }
}
