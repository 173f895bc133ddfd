//! The connection pool: the QPs that `get` and `put` lease, one per transfer.
//!
//! A lease is an RAII handle; dropping it returns the connection. A
//! connection that saw any error is destroyed, never reused, and replaced by
//! a new one; if that fails the pool shrinks, and an empty pool fails
//! transfers. A thread that already holds a lease (a callback starting a
//! transfer) gets `Busy` instead of waiting, since the connection it would
//! wait for could be its own.

use std::cell::Cell;
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
            }),
            available: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leases a connection, preferring one bound to the server that answered
    /// last, then an unbound one. Waits while every connection is leased,
    /// unless this thread already holds a lease.
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
            let last = st.last_peer;
            let pick = st
                .free
                .iter()
                .position(|c| last.is_some() && c.peer().map(|p| p.gid) == last)
                .or_else(|| st.free.iter().position(|c| c.peer().is_none()))
                .or_else(|| (!st.free.is_empty()).then_some(0));
            if let Some(i) = pick {
                let conn = st.free.swap_remove(i);
                st.leased += 1;
                HELD.with(|h| h.set(h.get() + 1));
                return Ok(Lease {
                    conn: Some(conn),
                    pool: self.clone(),
                    answered: None,
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
            st.last_peer = Some(gid);
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

/// One leased connection; dropping it returns the connection to the pool.
#[derive(Debug)]
pub struct Lease {
    conn: Option<Connection>,
    pool: Arc<ConnectionPool>,
    answered: Option<Gid>,
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
    /// connection, so later transfers prefer connections bound to it.
    pub fn note_success(&mut self, gid: Gid) {
        self.answered = Some(gid);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(conn, self.answered);
        }
    }
}
