//! The connection pool: the QPs that `get` and `put` lease, one per transfer.
//!
//! A lease is an RAII handle; dropping it returns the connection. A lease
//! counts as broken unless the transfer's success path says otherwise
//! ([`Lease::note_success`]): an error, an early return or a panic all end
//! with the connection destroyed, never reused, and replaced by a new one;
//! if that fails the pool shrinks, and an empty pool fails transfers.
//!
//! Which connection a lease gets is a guess at the server the request will
//! reach (the library learns it only from the reply): the server that
//! followed the last one the previous time, else the last one. When the
//! reply is a 409 from a server the leased connection is not bound to,
//! [`ConnectionPool::swap`] trades it for one bound to that server, else an
//! unbound one, so that alternating between servers does not rebind
//! connections back and forth. A thread that already holds a lease (a callback starting a
//! transfer) gets `Busy` instead of waiting, since the connection it would
//! wait for could be its own.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use hipobj_platform::Gid;

use crate::connection::Connection;
use crate::device::RdmaDevice;
use crate::error::{Error, ErrorKind, Result};

thread_local! {
    /// Leases the current thread holds, across every pool.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

#[derive(Debug)]
struct PoolState {
    free: Vec<Connection>,
    leased: usize,
    /// Slots whose broken connection is being replaced.
    replacing: usize,
    closed: bool,
    /// The server that answered the most recent successful transfer.
    last_peer: Option<Gid>,
    /// For each server, the server that answered the success after one of
    /// its own last time: the guess for the next lease.
    next_after: HashMap<Gid, Gid>,
}

/// Most servers [`PoolState::next_after`] remembers; it starts over when full.
const MAX_REMEMBERED_SERVERS: usize = 64;

impl PoolState {
    /// The server the next request most likely reaches.
    fn predicted(&self) -> Option<Gid> {
        let last = self.last_peer?;
        Some(self.next_after.get(&last).copied().unwrap_or(last))
    }

    fn note_answer(&mut self, gid: Gid) {
        if let Some(prev) = self.last_peer {
            if self.next_after.len() >= MAX_REMEMBERED_SERVERS && !self.next_after.contains_key(&prev) {
                self.next_after.clear();
            }
            self.next_after.insert(prev, gid);
        }
        self.last_peer = Some(gid);
    }

    /// A free connection bound to `gid`, else an unbound one.
    fn bound_or_unbound(&self, gid: Option<Gid>) -> Option<usize> {
        self.free
            .iter()
            .position(|c| gid.is_some() && c.peer().map(|p| p.gid) == gid)
            .or_else(|| self.free.iter().position(|c| c.peer().is_none()))
    }
}

/// A fixed set of connections, leased one per transfer.
#[derive(Debug)]
pub struct ConnectionPool {
    device: Arc<RdmaDevice>,
    state: Mutex<PoolState>,
    available: Condvar,
}

impl ConnectionPool {
    /// Creates `size` connections on `device`; creating fewer is a failure.
    pub fn new(device: Arc<RdmaDevice>, size: u32) -> Result<Self> {
        let mut free = Vec::with_capacity(size as usize);
        for _ in 0..size {
            free.push(Connection::new(device.clone())?);
        }
        Ok(Self {
            device,
            state: Mutex::new(PoolState {
                free,
                leased: 0,
                replacing: 0,
                closed: false,
                last_peer: None,
                next_after: HashMap::new(),
            }),
            available: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leases a connection, preferring one bound to the server the request
    /// most likely reaches (see the module docs), then an unbound one. Waits
    /// while every connection is leased, unless this thread already holds a
    /// lease.
    pub fn acquire(self: &Arc<Self>) -> Result<Lease> {
        let mut st = self.lock();
        loop {
            if st.closed {
                return Err(Error::new(ErrorKind::NotInitialized, "hipObject was shut down"));
            }
            if st.free.is_empty() && st.leased == 0 && st.replacing == 0 {
                return Err(Error::new(
                    ErrorKind::RdmaError,
                    "no RDMA connections are left: every one failed and could not be replaced",
                ));
            }
            let pick = st
                .bound_or_unbound(st.predicted())
                .or_else(|| (!st.free.is_empty()).then_some(0));
            if let Some(i) = pick {
                let conn = st.free.swap_remove(i);
                st.leased += 1;
                HELD.with(|h| h.set(h.get() + 1));
                return Ok(Lease {
                    conn: Some(conn),
                    pool: self.clone(),
                    answered: None,
                    healthy: false,
                });
            }
            if HELD.with(Cell::get) > 0 {
                return Err(Error::busy(
                    "every RDMA connection is in use, and this thread already holds one (a transfer started from a callback)",
                ));
            }
            st = self.available.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// After a 409 from the server `gid` on `lease`'s connection, which is
    /// bound to another server: trades that connection for a free one bound
    /// to `gid`, else an unbound one, and returns whether it did. The
    /// connection given back keeps its binding and stays usable: the 409
    /// moved no data.
    pub fn swap(&self, lease: &mut Lease, gid: Gid) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        let Some(i) = st.bound_or_unbound(Some(gid)) else {
            return false;
        };
        let Some(old) = lease.conn.take() else {
            return false;
        };
        let new = st.free.swap_remove(i);
        lease.conn = Some(new);
        st.free.push(old);
        drop(st);
        self.available.notify_one();
        true
    }

    /// Fails every later `acquire`, and wakes those waiting, with `NotInitialized`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.available.notify_all();
    }

    /// Connections free and leased.
    pub fn size(&self) -> usize {
        let st = self.lock();
        st.free.len() + st.leased + st.replacing
    }

    fn give_back(&self, conn: Connection, peer_answered: Option<Gid>) {
        let mut st = self.lock();
        st.leased -= 1;
        if let Some(gid) = peer_answered {
            st.note_answer(gid);
        }
        if !conn.is_broken() {
            st.free.push(conn);
            drop(st);
            self.available.notify_one();
            return;
        }
        // Destroy the broken connection and build its replacement outside
        // the lock. The guard keeps the slot counted while that runs, and
        // gives it up even if building panics, so waiters never hang on it.
        st.replacing += 1;
        drop(st);
        let guard = Replacing { pool: self };
        drop(conn);
        let fresh = Connection::new(self.device.clone()).ok();
        guard.finish(fresh);
    }
}

/// A slot whose broken connection is being replaced.
struct Replacing<'a> {
    pool: &'a ConnectionPool,
}

impl Replacing<'_> {
    fn finish(self, fresh: Option<Connection>) {
        if let Some(conn) = fresh {
            self.pool.lock().free.push(conn);
        }
        // Drop updates the count and wakes the waiters.
    }
}

impl Drop for Replacing<'_> {
    fn drop(&mut self) {
        self.pool.lock().replacing -= 1;
        // Wake everyone: if the pool shrank to nothing, waiters must fail
        // instead of sleeping forever.
        self.pool.available.notify_all();
    }
}

/// One leased connection; dropping it returns the connection to the pool,
/// broken (so destroyed) unless [`Lease::note_success`] was called.
#[derive(Debug)]
pub struct Lease {
    conn: Option<Connection>,
    pool: Arc<ConnectionPool>,
    answered: Option<Gid>,
    /// Set only by the success path; anything else breaks the connection.
    healthy: bool,
}

impl Lease {
    /// The leased connection.
    pub fn conn(&mut self) -> &mut Connection {
        // Present from creation until drop.
        self.conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("a lease holds its connection until dropped"))
    }

    /// Records that the server with `gid` completed a transfer on this
    /// connection, which may be used again; later transfers guess their
    /// server from it. Without this call the connection is destroyed when
    /// the lease is dropped.
    pub fn note_success(&mut self, gid: Gid) {
        self.answered = Some(gid);
        self.healthy = true;
    }

    /// Trades the connection after a 409 from another server (see
    /// [`ConnectionPool::swap`]).
    pub fn swap_for(&mut self, gid: Gid) -> bool {
        let pool = self.pool.clone();
        pool.swap(self, gid)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
        if let Some(mut conn) = self.conn.take() {
            if !self.healthy {
                // An error, an early return or a panic: whatever the server
                // was doing, this QP leaves RTS for good.
                conn.mark_broken();
            }
            self.pool.give_back(conn, self.answered.filter(|_| self.healthy));
        }
    }
}
