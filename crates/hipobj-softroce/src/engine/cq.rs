//! Completion queues: where the engine leaves work completions and where the
//! application polls or waits for them.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hipobj_platform::{VerbsError, VerbsErrorKind, WorkCompletion};

#[derive(Debug)]
struct State {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    overrun: bool,
}

/// A completion queue of bounded capacity. A completion that finds it full
/// is lost and puts the queue in error, as a CQ overrun does on hardware:
/// every later [`Cq::poll`] fails.
#[derive(Debug)]
pub struct Cq {
    state: Mutex<State>,
    ready: Condvar,
}

impl Cq {
    /// A queue with room for `capacity` completions.
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                entries: VecDeque::with_capacity(capacity.min(4096)),
                capacity,
                overrun: false,
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a completion and wakes waiters. Returns `false` if the queue
    /// was full (the queue is then in error).
    pub fn push(&self, wc: WorkCompletion) -> bool {
        let mut s = self.lock();
        if s.overrun || s.entries.len() >= s.capacity {
            s.overrun = true;
            drop(s);
            self.ready.notify_all();
            return false;
        }
        s.entries.push_back(wc);
        drop(s);
        self.ready.notify_all();
        true
    }

    /// Moves up to `out.len()` completions into `out`, oldest first.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        let mut s = self.lock();
        if s.overrun {
            return Err(VerbsError::new(
                "ibv_poll_cq",
                VerbsErrorKind::OutOfResources,
                "completion queue overrun: a completion found it full and was lost",
            ));
        }
        let n = out.len().min(s.entries.len());
        for (slot, wc) in out.iter_mut().zip(s.entries.drain(..n)) {
            *slot = wc;
        }
        Ok(n)
    }

    /// Blocks until a completion is queued (or the queue overran) or
    /// `timeout` passes; says whether the queue is non-empty or in error.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        loop {
            if !s.entries.is_empty() || s.overrun {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = self
                .ready
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipobj_platform::{WcOpcode, WcStatus};

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id: id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            imm_data: None,
            qp_num: 1,
        }
    }

    #[test]
    fn overrun_is_an_error() {
        let cq = Cq::new(2);
        assert!(cq.push(wc(1)));
        assert!(cq.push(wc(2)));
        assert!(!cq.push(wc(3)));
        let mut out = [wc(0); 4];
        assert!(cq.poll(&mut out).is_err());
        assert!(cq.wait(Duration::ZERO));
    }

    #[test]
    fn poll_is_fifo_and_wait_wakes() {
        let cq = std::sync::Arc::new(Cq::new(8));
        assert!(!cq.wait(Duration::from_millis(1)));
        let c2 = cq.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            c2.push(wc(7));
            c2.push(wc(8));
        });
        assert!(cq.wait(Duration::from_secs(5)));
        t.join().ok();
        let mut out = [wc(0); 4];
        let n = cq.poll(&mut out).unwrap_or(0);
        assert_eq!(out[..n].iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![7, 8]);
    }
}
