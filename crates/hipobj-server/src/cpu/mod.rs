//! The server's CPU time by what its threads do, for
//! `hipobj_server_cpu_seconds_total{role="..."}` in `/.hipobj/metrics`
//! (docs/server.md, "Metrics"; docs/performance.md says what it is for).
//!
//! Each thread has a role by its name: the runtime's workers and blocking
//! threads (`hipobj-srv`, set by the `hipobj-server` binary) handle the
//! requests and run the store; the soft NIC's workers (`nic:<device>`) do
//! what a hardware NIC would. The RDMA mover runs on blocking threads, so
//! its time is measured by scopes on the thread's own clock
//! ([`scope::Scope`]) and moved from the thread's role to [`Role::Rdma`].
//!
//! Per-thread figures come from procfs at each scrape. A thread's last
//! figure is kept after it ends: the runtime's threads report it as they
//! stop ([`thread_stopping`]), and any other thread keeps what the last
//! scrape saw of it. One scrape runs at a time, and no sooner than
//! [`MIN_SCRAPE_GAP`] after the one before, so a client that asks for the
//! metrics in a loop costs the server a bounded share of one core.

mod procfs;
mod scope;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use scope::{Scope, StoreSide};

/// What the `hipobj-server` binary names its runtime's threads.
pub const RUNTIME_THREAD_NAME: &str = "hipobj-srv";

/// The least time from one scrape's start to the next one's.
pub const MIN_SCRAPE_GAP: Duration = Duration::from_millis(50);

/// What a thread's CPU time is spent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Request handling and storage: HTTP, SigV4, S3, the store, the
    /// runtime's blocking threads outside the mover.
    S3,
    /// The RDMA mover: the token check, the binding, posting work requests
    /// and waiting for their completions, the reply.
    Rdma,
    /// The soft NIC's workers (a hardware NIC spends no host CPU on this).
    Nic,
    /// Every other thread (`main`, threads named by an embedding program).
    Other,
}

impl Role {
    const COUNT: usize = 4;
    /// Every role, in exposition order.
    pub const ALL: [Role; Role::COUNT] = [Role::S3, Role::Rdma, Role::Nic, Role::Other];

    /// The `role` label's value.
    pub fn label(self) -> &'static str {
        match self {
            Role::S3 => "s3",
            Role::Rdma => "rdma",
            Role::Nic => "nic",
            Role::Other => "other",
        }
    }
}

/// The role a thread named `name` has (by prefix: names are cut to 15 bytes).
pub fn role_of(name: &str) -> Role {
    if name.starts_with(hipobj_system::SOFTROCE_WORKER_THREAD_PREFIX) {
        Role::Nic
    } else if name.starts_with(RUNTIME_THREAD_NAME) {
        Role::S3
    } else {
        Role::Other
    }
}

/// Every thread seen so far: the live ones by (id, start), and the totals
/// of those that ended.
#[derive(Debug, Default)]
struct Ledger {
    live: HashMap<(u32, u64), (Role, u64)>,
    ended: [u64; Role::COUNT],
}

impl Ledger {
    /// Records a reading of one thread; a figure never goes down.
    fn note(&mut self, t: &procfs::ThreadStat) {
        let e = self.live.entry((t.tid, t.start)).or_insert((role_of(&t.name), 0));
        e.1 = e.1.max(t.cpu_ns);
    }

    /// A full listing: threads not in it have ended, and their last figure
    /// moves to the totals.
    fn scan(&mut self, now: &[procfs::ThreadStat]) {
        for t in now {
            self.note(t);
        }
        let alive: std::collections::HashSet<(u32, u64)> = now.iter().map(|t| (t.tid, t.start)).collect();
        let ended = &mut self.ended;
        self.live.retain(|k, (role, ns)| {
            let keep = alive.contains(k);
            if !keep {
                ended[*role as usize] = ended[*role as usize].saturating_add(*ns);
            }
            keep
        });
    }

    /// Nanoseconds by role, scopes' moves applied.
    fn totals(&self) -> [u64; Role::COUNT] {
        let mut t = self.ended;
        for (role, ns) in self.live.values() {
            t[*role as usize] = t[*role as usize].saturating_add(*ns);
        }
        for r in Role::ALL {
            let (into, out_of) = scope::MOVED.of(r);
            t[r as usize] = t[r as usize].saturating_add(into).saturating_sub(out_of);
        }
        t
    }
}

static LEDGER: Mutex<Option<Ledger>> = Mutex::new(None);

fn with_ledger<R>(f: impl FnOnce(&mut Ledger) -> R) -> R {
    let mut g = LEDGER.lock().unwrap_or_else(PoisonError::into_inner);
    f(g.get_or_insert_with(Ledger::default))
}

/// For the runtime's `on_thread_stop`: keeps the stopping thread's final
/// CPU time, which the next scrape could no longer read.
pub fn thread_stopping() {
    if let Some(t) = procfs::this_thread() {
        with_ledger(|l| l.note(&t));
    }
}

/// Names a runtime's threads [`RUNTIME_THREAD_NAME`] (their time is
/// [`Role::S3`]) and keeps each one's last figure as it stops.
pub fn name_threads(b: &mut tokio::runtime::Builder) -> &mut tokio::runtime::Builder {
    b.thread_name(RUNTIME_THREAD_NAME).on_thread_stop(thread_stopping)
}

/// Runs the RDMA mover's `f`: its time on this thread is [`Role::Rdma`],
/// but for what [`StoreSide`] hands to the store.
pub fn mover<R>(f: impl FnOnce() -> R) -> R {
    let _s = Scope::enter(Role::Rdma);
    f()
}

/// One reading of the server's CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// Seconds by role, in [`Role::ALL`] order.
    pub by_role: [f64; Role::COUNT],
    /// The whole process (threads that ended included), at 10 ms resolution.
    pub process: f64,
}

impl Reading {
    /// Seconds of `role`.
    pub fn of(&self, role: Role) -> f64 {
        self.by_role[role as usize]
    }
}

/// Reads every thread now (blocking: procfs files, two per thread).
pub fn read_now() -> Reading {
    let threads = procfs::threads();
    let totals = with_ledger(|l| {
        l.scan(&threads);
        l.totals()
    });
    Reading {
        by_role: totals.map(|ns| ns as f64 / 1e9),
        process: procfs::process_cpu_ns().map_or(0.0, |ns| ns as f64 / 1e9),
    }
}

/// The last scrape: when it started and what it read.
static LAST: tokio::sync::Mutex<Option<(Instant, Reading)>> = tokio::sync::Mutex::const_new(None);

/// A reading taken after this call began: one scrape at a time, and no
/// sooner than [`MIN_SCRAPE_GAP`] after the last one started; callers that
/// wait together share one.
pub async fn read() -> Reading {
    let asked = Instant::now();
    let mut last = LAST.lock().await;
    if let Some((at, r)) = *last {
        if at >= asked {
            return r;
        }
        tokio::time::sleep_until((at + MIN_SCRAPE_GAP).into()).await;
    }
    let at = Instant::now();
    let r = tokio::task::spawn_blocking(read_now).await.unwrap_or_default();
    *last = Some((at, r));
    r
}

/// The metrics of a reading: CPU seconds by role and of the whole process.
pub fn entries(r: &Reading) -> Vec<crate::metrics::Entry> {
    use crate::metrics::{Entry, Value};
    vec![
        Entry {
            name: "hipobj_server_cpu_seconds",
            help: "CPU time of the server's threads by role: s3 (requests and storage), \
                   rdma (the mover), nic (soft NIC workers), other",
            counter: true,
            values: Role::ALL
                .iter()
                .map(|role| (vec![("role", role.label())], Value::Real(r.of(*role))))
                .collect(),
        },
        Entry::counter(
            "hipobj_server_process_cpu_seconds",
            "CPU time of the whole process, 10 ms resolution",
            Value::Real(r.process),
        ),
    ]
}

/// The Prometheus text of a reading.
pub fn render(r: &Reading) -> String {
    crate::metrics::encode_entries(entries(r))
}

#[cfg(test)]
mod tests {
    use super::procfs::ThreadStat;
    use super::*;

    fn t(tid: u32, name: &str, start: u64, ms: u64) -> ThreadStat {
        ThreadStat {
            tid,
            name: name.into(),
            start,
            cpu_ns: ms * 1_000_000,
        }
    }

    fn ms(l: &Ledger) -> Vec<u64> {
        // Without the scopes' moves (those are process-wide).
        let mut v = l.ended;
        for (role, ns) in l.live.values() {
            v[*role as usize] += ns;
        }
        v.iter().map(|ns| ns / 1_000_000).collect()
    }

    #[test]
    fn threads_keep_their_time_after_they_end_and_a_reused_id_is_a_new_thread() {
        let mut l = Ledger::default();
        l.scan(&[
            t(1, "hipobj-server", 10, 5),
            t(2, "hipobj-srv", 11, 100),
            t(3, "nic:softroce0", 12, 300),
            t(4, "hipobj-srv", 13, 40),
        ]);
        assert_eq!(ms(&l), vec![140, 0, 300, 5]);
        // 4 reports its last figure as it stops, then is gone from the
        // listing; its id is reused by a new thread with less time.
        l.note(&t(4, "hipobj-srv", 13, 70));
        l.scan(&[
            t(1, "hipobj-server", 10, 6),
            t(2, "hipobj-srv", 11, 150),
            t(3, "nic:softroce0", 12, 450),
            t(4, "hipobj-srv", 99, 2),
        ]);
        assert_eq!(ms(&l), vec![150 + 70 + 2, 0, 450, 6]);
        // A figure read late (lower) never takes time back.
        l.scan(&[t(2, "hipobj-srv", 11, 149), t(3, "nic:softroce0", 12, 450)]);
        assert_eq!(ms(&l), vec![150 + 70 + 2, 0, 450, 6]);
    }

    #[test]
    fn roles_by_thread_name() {
        assert_eq!(role_of("nic:softroce0"), Role::Nic);
        assert_eq!(role_of("hipobj-srv"), Role::S3);
        assert_eq!(role_of("hipobj-server"), Role::Other);
        assert_eq!(role_of("tokio-runtime-w"), Role::Other);
        assert_eq!(role_of("main"), Role::Other);
    }

    #[test]
    fn the_text_has_one_line_per_role() {
        let r = Reading {
            by_role: [1.5, 0.25, 3.0, 0.0],
            process: 4.75,
        };
        let text = render(&r);
        assert!(
            text.contains("hipobj_server_cpu_seconds_total{role=\"s3\"} 1.5\n"),
            "{text}"
        );
        assert!(
            text.contains("hipobj_server_cpu_seconds_total{role=\"rdma\"} 0.25\n"),
            "{text}"
        );
        assert!(
            text.contains("hipobj_server_cpu_seconds_total{role=\"nic\"} 3.0\n"),
            "{text}"
        );
        assert!(
            text.contains("hipobj_server_process_cpu_seconds_total 4.75\n"),
            "{text}"
        );
    }
}
