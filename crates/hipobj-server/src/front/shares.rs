//! Each client address's share of the connection slots (docs/server.md,
//! "Connections"): one address holds at most `max_connections_per_address`
//! connections, so that sockets from one place that never send a byte
//! cannot take the slots every other client needs (issue 25, finding 1).
//!
//! IPv6 clients are counted by their /64 (one host commonly has a whole
//! /64), IPv4 ones by their address. A connection beyond its address's
//! share closes that address's connection that has waited longest between
//! requests, or, when every one of them is serving a request, is refused.
//! When the server is at its global cap, the address holding the most
//! connections gives up its longest-waiting idle one first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::front::conn::ConnState;
use crate::metrics::Metrics;

/// What connections are counted by: an IPv4 address, or an IPv6 /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Source(IpAddr);

impl Source {
    /// The source `ip` counts against.
    pub(crate) fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let mut o = v6.octets();
                o[8..].fill(0);
                Self(IpAddr::from(o))
            }
            v4 => Self(v4),
        }
    }
}

#[derive(Debug)]
struct Entry {
    id: u64,
    state: Arc<ConnState>,
}

/// The connections open now, by source.
#[derive(Debug)]
pub(crate) struct Shares {
    per_source: usize,
    open: Mutex<HashMap<Source, Vec<Entry>>>,
    next_id: AtomicU64,
    metrics: Arc<Metrics>,
}

/// One admitted connection's place in its share; dropping it gives the
/// place back.
#[derive(Debug)]
pub(crate) struct Ticket {
    shares: Arc<Shares>,
    source: Source,
    id: u64,
    /// Whether admitting it closed another connection of its source (whose
    /// slot is about to free).
    pub made_room: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.shares.lock();
        if let Some(v) = open.get_mut(&self.source) {
            v.retain(|e| e.id != self.id);
            if v.is_empty() {
                open.remove(&self.source);
            }
        }
    }
}

/// The entry of `v` to close for room: one between requests whose current
/// wait began first.
fn victim(v: &[Entry]) -> Option<usize> {
    v.iter()
        .enumerate()
        .filter(|(_, e)| e.state.is_between_requests())
        .min_by_key(|(_, e)| e.state.waiting_since())
        .map(|(i, _)| i)
}

impl Shares {
    /// Shares of `per_source` connections each.
    pub(crate) fn new(per_source: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            per_source: per_source.max(1),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Source, Vec<Entry>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections open now from `ip`'s source.
    #[cfg(test)]
    pub(crate) fn open_from(&self, ip: IpAddr) -> usize {
        self.lock().get(&Source::of(ip)).map_or(0, Vec::len)
    }

    /// Admits a connection from `ip` whose state is `state`. At the
    /// source's share, its longest-waiting idle connection is closed to
    /// make room; with none idle, `None`: the caller drops the connection.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr, state: Arc<ConnState>) -> Option<Ticket> {
        let source = Source::of(ip);
        let mut open = self.lock();
        let v = open.entry(source).or_default();
        let mut made_room = false;
        if v.len() >= self.per_source {
            let share = self.per_source;
            match victim(v) {
                Some(i) => {
                    v.swap_remove(i).state.close();
                    self.metrics
                        .limit_acted(&self.metrics.http_connections_closed_for_room, "connection_closed_for_room", || {
                            format!(
                                "{} holds its share of {share} connections (http.max_connections_per_address): \
                                 its longest-idle one was closed for a new one",
                                source.0
                            )
                        });
                    made_room = true;
                }
                None => {
                    self.metrics
                        .limit_acted(&self.metrics.http_connections_refused, "max_connections_per_address", || {
                            format!(
                                "{} holds its share of {share} connections (http.max_connections_per_address), \
                                 all serving requests: a new one was refused",
                                source.0
                            )
                        });
                    return None;
                }
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        v.push(Entry { id, state });
        Some(Ticket {
            shares: self.clone(),
            source,
            id,
            made_room,
        })
    }

    /// At the global cap: closes the longest-waiting idle connection of the
    /// source holding the most connections (the next source if that one
    /// has none idle), never `waiting`'s. Whether one was closed.
    pub(crate) fn close_one_for_room(&self, waiting: Option<&Ticket>) -> bool {
        let waiting = waiting.map(|t| t.id);
        let mut open = self.lock();
        let mut sources: Vec<(usize, Source)> = open.iter().map(|(s, v)| (v.len(), *s)).collect();
        sources.sort_by_key(|s| std::cmp::Reverse(s.0));
        for (_, source) in sources {
            let Some(v) = open.get_mut(&source) else {
                continue;
            };
            let others: Vec<usize> = (0..v.len()).filter(|&i| Some(v[i].id) != waiting).collect();
            let pick = victim(
                &v.iter()
                    .filter(|e| Some(e.id) != waiting)
                    .map(|e| Entry {
                        id: e.id,
                        state: e.state.clone(),
                    })
                    .collect::<Vec<_>>(),
            );
            if let Some(i) = pick.map(|j| others[j]) {
                v.swap_remove(i).state.close();
                self.metrics
                    .limit_acted(&self.metrics.http_connections_closed_for_room, "connection_closed_for_room", || {
                        format!(
                            "the server holds http.max_connections: an idle connection of {} was closed for a new one",
                            source.0
                        )
                    });
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("an address");
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().expect("an address");
        let c: IpAddr = "2001:db8:1:3::1".parse().expect("an address");
        assert_eq!(Source::of(a), Source::of(b));
        assert_ne!(Source::of(a), Source::of(c));
        let m: IpAddr = "::ffff:10.0.0.1".parse().expect("an address");
        assert_eq!(Source::of(m), Source::of(IpAddr::from([10, 0, 0, 1])));
        assert_ne!(
            Source::of(IpAddr::from([10, 0, 0, 1])),
            Source::of(IpAddr::from([10, 0, 0, 2]))
        );
    }

    #[test]
    fn a_source_at_its_share_gives_up_an_idle_connection_or_is_refused() {
        let shares = Shares::new(2, Arc::new(Metrics::default()));
        let ip = IpAddr::from([127, 0, 0, 2]);
        let (a, b) = (ConnState::new(), ConnState::new());
        let ta = shares.admit(ip, a.clone());
        let tb = shares.admit(ip, b.clone());
        assert!(ta.is_some() && tb.is_some());
        // Both serving: a third is refused.
        let (_sa, _sb) = (a.serving(), b.serving());
        assert!(shares.admit(ip, ConnState::new()).is_none());
        // Another address is not affected.
        let other = shares.admit(IpAddr::from([127, 0, 0, 3]), ConnState::new());
        assert!(other.is_some());
        drop(_sa);
        // `a` is idle now: the next one from `ip` closes it.
        let tc = shares.admit(ip, ConnState::new());
        assert!(tc.is_some());
        assert!(a.is_closed() && !b.is_closed());
        assert_eq!(shares.open_from(ip), 2);
        drop((ta, tb, tc));
        assert_eq!(shares.open_from(ip), 0);
    }
}
