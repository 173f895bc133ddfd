//! The buffers a GET is staged in: a GET's bytes go to the client as one
//! RDMA WRITE WITH IMMEDIATE of the whole range (docs/protocol.md §2), so
//! the whole selection sits in registered memory before the WRITE is
//! posted. At most `count` such buffers exist at once, out or kept for
//! reuse, each of one GET's length (rounded up to whole chunks so that
//! parts of one size reuse them); a GET that finds none waits for one, up
//! to a timeout.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hipobj_platform::memory::RegisteredBuffer;
use hipobj_platform::{AccessFlags, ProtectionDomain, VerbsError};

/// Why no staging buffer was had.
#[derive(Debug)]
pub(crate) enum Shortage {
    /// Every one of this many buffers stayed out for the whole wait.
    Busy(usize),
    /// Registering a new one failed.
    Verbs(VerbsError),
}

/// The staging buffers of one target.
#[derive(Debug)]
pub(crate) struct Staging {
    state: Mutex<State>,
    returned: Condvar,
    count: usize,
    round: usize,
}

#[derive(Debug, Default)]
struct State {
    kept: Vec<RegisteredBuffer>,
    out: usize,
}

impl Staging {
    /// At most `count` buffers (at least one), sized in multiples of
    /// `round` bytes.
    pub(crate) fn new(count: usize, round: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            returned: Condvar::new(),
            count: count.max(1),
            round: round.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A buffer of at least `size` bytes, local access only: a kept one
    /// that is large enough, or a new one (a smaller kept one makes room).
    /// Waits up to `wait` while every buffer is out.
    pub(crate) fn take(
        &self,
        pd: &dyn ProtectionDomain,
        size: usize,
        wait: Duration,
    ) -> Result<RegisteredBuffer, Shortage> {
        let deadline = Instant::now() + wait;
        let mut st = self.lock();
        loop {
            if let Some(i) = st.kept.iter().position(|b| b.len() >= size) {
                let b = st.kept.swap_remove(i);
                st.out += 1;
                return Ok(b);
            }
            if st.out + st.kept.len() < self.count || !st.kept.is_empty() {
                if st.out + st.kept.len() >= self.count {
                    // Every kept one is too small: the smallest goes.
                    if let Some(i) = (0..st.kept.len()).min_by_key(|&i| st.kept[i].len()) {
                        drop(st.kept.swap_remove(i));
                    }
                }
                st.out += 1;
                drop(st);
                let len = size.div_ceil(self.round).saturating_mul(self.round).max(size);
                let made = RegisteredBuffer::new(pd, len, AccessFlags::LOCAL_WRITE);
                if made.is_err() {
                    self.give_back(None);
                }
                return made.map_err(Shortage::Verbs);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Shortage::Busy(self.count));
            }
            st = self
                .returned
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Returns a buffer [`Staging::take`] gave (or, with `None`, the place
    /// of one that could not be made).
    pub(crate) fn give_back(&self, buffer: Option<RegisteredBuffer>) {
        let mut st = self.lock();
        st.out = st.out.saturating_sub(1);
        if let Some(b) = buffer {
            st.kept.push(b);
        }
        drop(st);
        self.returned.notify_one();
    }

    /// Buffers out now.
    #[cfg(test)]
    fn out(&self) -> usize {
        self.lock().out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use hipobj_platform::Verbs;
    use hipobj_platform::fake::{FakeDeviceSpec, FakeVerbs, Faults};

    fn pd() -> std::sync::Arc<dyn ProtectionDomain> {
        let verbs = FakeVerbs::new(vec![FakeDeviceSpec::default()], Faults::default());
        let dev = verbs.open_device("fake0").unwrap();
        dev.alloc_pd().unwrap()
    }

    #[test]
    fn never_more_than_count_buffers_and_a_waiter_gets_one_back() {
        let pd = pd();
        let s = std::sync::Arc::new(Staging::new(2, 4096));
        let a = s.take(pd.as_ref(), 5000, Duration::ZERO).unwrap();
        assert_eq!(a.len(), 8192, "rounded up to whole chunks");
        let b = s.take(pd.as_ref(), 100, Duration::ZERO).unwrap();
        let e = s.take(pd.as_ref(), 100, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(e, Shortage::Busy(2)), "{e:?}");
        let waiter = {
            let (s, pd) = (s.clone(), pd.clone());
            std::thread::spawn(move || {
                s.take(pd.as_ref(), 8192, Duration::from_secs(30))
                    .map(|b| b.len())
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        s.give_back(Some(a));
        assert_eq!(
            waiter.join().unwrap().unwrap(),
            8192,
            "the returned buffer is reused"
        );
        s.give_back(Some(b));
        assert_eq!(s.out(), 1);
    }

    #[test]
    fn a_kept_buffer_too_small_makes_room_for_a_larger_one() {
        let pd = pd();
        let s = Staging::new(1, 4096);
        let a = s.take(pd.as_ref(), 4096, Duration::ZERO).unwrap();
        s.give_back(Some(a));
        let b = s.take(pd.as_ref(), 1 << 20, Duration::ZERO).unwrap();
        assert_eq!(b.len(), 1 << 20);
        s.give_back(Some(b));
        assert_eq!(s.lock().kept.len(), 1);
    }
}
