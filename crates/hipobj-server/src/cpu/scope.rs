//! CPU time a thread spends inside a scope of another role: the RDMA mover
//! runs on the runtime's blocking threads, so its time is told apart from
//! the request's and the store's by the thread's own CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`, one system call) read where the mover starts
//! and stops, and where it hands a chunk to the store and gets it back.
//!
//! What a scope measures is *moved*: added to the scope's role and taken
//! from the role the thread's name gives it, so the per-thread totals from
//! procfs still add up to the process's.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use hipobj_target::{Selected, Sink, Source};

use super::Role;

/// Nanoseconds moved into each role by scopes, and out of each role.
pub(super) struct Moved {
    into: [AtomicU64; Role::COUNT],
    out_of: [AtomicU64; Role::COUNT],
}

pub(super) static MOVED: Moved = Moved {
    into: [const { AtomicU64::new(0) }; Role::COUNT],
    out_of: [const { AtomicU64::new(0) }; Role::COUNT],
};

impl Moved {
    /// (moved into, moved out of) `role` so far.
    pub(super) fn of(&self, role: Role) -> (u64, u64) {
        (
            self.into[role as usize].load(Ordering::Relaxed),
            self.out_of[role as usize].load(Ordering::Relaxed),
        )
    }

    fn credit(&self, from: Role, to: Role, ns: u64) {
        if from != to && ns > 0 {
            self.into[to as usize].fetch_add(ns, Ordering::Relaxed);
            self.out_of[from as usize].fetch_add(ns, Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// The open scope of this thread: its role and the thread's CPU clock
    /// when it opened (or was last resumed).
    static OPEN: Cell<Option<(Role, u64)>> = const { Cell::new(None) };
    /// The role this thread's name gives it (found once).
    static BASE: Cell<Option<Role>> = const { Cell::new(None) };
}

/// The calling thread's CPU time, in nanoseconds.
fn thread_clock() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

fn base_role() -> Role {
    BASE.with(|b| {
        *b.get().get_or_insert_with(|| {
            let r = super::role_of(std::thread::current().name().unwrap_or(""));
            b.set(Some(r));
            r
        })
    })
}

/// An open scope: until it drops, the calling thread's CPU time counts for
/// its role. Scopes nest (the inner one pauses the outer); one must drop on
/// the thread that opened it, which holding it across no `.await` ensures.
#[must_use = "the scope counts only while it is held"]
#[derive(Debug)]
pub struct Scope {
    outer: Option<Role>,
    /// Not `Send`: a scope ends on its own thread.
    _here: std::marker::PhantomData<*const ()>,
}

impl Scope {
    /// Opens a scope of `role` on the calling thread.
    pub fn enter(role: Role) -> Self {
        let now = thread_clock();
        let base = base_role();
        let outer = OPEN.with(|o| {
            let outer = o.get().map(|(r, since)| {
                MOVED.credit(base, r, now.saturating_sub(since));
                r
            });
            o.set(Some((role, now)));
            outer
        });
        Self {
            outer,
            _here: std::marker::PhantomData,
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let now = thread_clock();
        let base = base_role();
        OPEN.with(|o| {
            if let Some((r, since)) = o.get() {
                MOVED.credit(base, r, now.saturating_sub(since));
            }
            o.set(self.outer.map(|r| (r, now)));
        });
    }
}

/// A [`Source`] whose calls count as [`Role::S3`] (the store's work) even
/// inside the mover's [`Role::Rdma`] scope.
#[derive(Debug)]
pub struct StoreSide<'a, T>(pub &'a mut T);

impl<T: Source> Source for StoreSide<'_, T> {
    type Error = T::Error;
    fn open(&mut self) -> Result<Selected, Self::Error> {
        let _s = Scope::enter(Role::S3);
        self.0.open()
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Self::Error> {
        let _s = Scope::enter(Role::S3);
        self.0.fill(off, buf)
    }
}

impl<T: Sink> Sink for StoreSide<'_, T> {
    type Error = T::Error;
    fn open(&mut self, len: u64) -> Result<(), Self::Error> {
        let _s = Scope::enter(Role::S3);
        self.0.open(len)
    }
    fn drain(&mut self, off: u64, chunk: &[u8]) -> Result<(), Self::Error> {
        let _s = Scope::enter(Role::S3);
        self.0.drain(off, chunk)
    }
    fn commit(&mut self) -> Result<(), Self::Error> {
        let _s = Scope::enter(Role::S3);
        self.0.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until the thread's own clock has moved `ns` (the work is
    /// real: the clock counts CPU time, not wall time).
    fn spin(ns: u64) {
        let end = thread_clock() + ns;
        let mut x = 1u64;
        while thread_clock() < end {
            for i in 0..1000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
    }

    /// A mover's time moves from the thread's role to RDMA, but for what it
    /// hands the store, which stays with the thread's role (here `S3`: the
    /// thread is named as the server's runtime names its threads).
    #[test]
    fn a_scope_moves_its_own_time_and_a_nested_store_call_pauses_it() {
        let ms = 1_000_000u64;
        let (inside, store, total) = std::thread::Builder::new()
            .name(format!("{}-test", super::super::RUNTIME_THREAD_NAME))
            .spawn(move || {
                let before = (MOVED.of(Role::Rdma), MOVED.of(Role::S3));
                let t0 = thread_clock();
                let mut store = 0;
                {
                    let _m = Scope::enter(Role::Rdma);
                    spin(20 * ms);
                    let s0 = thread_clock();
                    {
                        let _s = Scope::enter(Role::S3);
                        spin(30 * ms);
                    }
                    store += thread_clock() - s0;
                    spin(20 * ms);
                }
                let total = thread_clock() - t0;
                let after = (MOVED.of(Role::Rdma), MOVED.of(Role::S3));
                // Only this test opens RDMA scopes in this process.
                let into_rdma = after.0.0 - before.0.0;
                let out_of_s3 = after.1.1 - before.1.1;
                assert_eq!(into_rdma, out_of_s3, "what RDMA gained, S3 lost");
                (into_rdma, store, total)
            })
            .expect("a thread")
            .join()
            .expect("the test thread");
        assert!(inside >= 40 * ms, "both spins in the mover count: {inside}");
        assert!(store >= 30 * ms, "{store}");
        // The clocks are read apart, so the sum may pass the total by the few
        // microseconds between reads; counting the store's 30 ms twice would
        // pass it by 30 ms.
        assert!(
            inside + store <= total + ms,
            "the store's 30 ms are not the mover's: mover {inside}, store {store}, all {total}"
        );
    }
}
