//! What the `hipobj-rc-v2` sessions may hold: sessions and staging memory,
//! counted per access key and in total, so that one key cannot take what
//! every other key needs (issue 25, finding 3).
//!
//! A [`Charge`] is what one session holds; it gives everything back when
//! it drops, whichever way the session ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::lock;

/// The limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Sessions open at once, all keys together.
    pub sessions: usize,
    /// Sessions one key may hold open at once.
    pub sessions_per_key: usize,
    /// Staging bytes held at once, all keys together.
    pub memory: usize,
    /// Staging bytes one key may hold at once.
    pub memory_per_key: usize,
}

#[derive(Debug, Default)]
struct Usage {
    sessions: usize,
    memory: usize,
    /// Per key: (sessions, bytes). A key holding nothing has no entry.
    keys: HashMap<String, (usize, usize)>,
}

/// The counts, shared by every session of one target.
#[derive(Debug)]
pub(crate) struct Quotas {
    limits: Limits,
    usage: Mutex<Usage>,
}

/// One session's share: one session, and the staging bytes it holds.
#[derive(Debug)]
pub(crate) struct Charge {
    quotas: Arc<Quotas>,
    key: String,
    memory: usize,
}

impl Quotas {
    pub(crate) fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            usage: Mutex::new(Usage::default()),
        })
    }

    /// Sessions open now and staging bytes held now.
    pub(crate) fn usage(&self) -> (usize, usize) {
        let u = lock(&self.usage);
        (u.sessions, u.memory)
    }

    /// One more session for `key`, holding no memory yet; `Err` with why
    /// when the key or the server is at its limit.
    pub(crate) fn session(self: &Arc<Self>, key: &str) -> Result<Charge, String> {
        let mut u = lock(&self.usage);
        let mine = u.keys.get(key).map_or(0, |k| k.0);
        if mine >= self.limits.sessions_per_key {
            return Err(format!(
                "this access key holds {mine} hipobj-rc-v2 sessions, its limit"
            ));
        }
        if u.sessions >= self.limits.sessions {
            return Err(format!(
                "all {} hipobj-rc-v2 sessions are in use",
                self.limits.sessions
            ));
        }
        u.sessions += 1;
        u.keys.entry(key.to_owned()).or_default().0 += 1;
        Ok(Charge {
            quotas: self.clone(),
            key: key.to_owned(),
            memory: 0,
        })
    }
}

impl Charge {
    /// `bytes` more of staging memory for this session; `Err` with why when
    /// its key or the server would go over its budget.
    pub(crate) fn memory(&mut self, bytes: usize) -> Result<(), String> {
        let q = &self.quotas;
        let mut u = lock(&q.usage);
        let mine = u.keys.get(&self.key).map_or(0, |k| k.1);
        if mine.saturating_add(bytes) > q.limits.memory_per_key {
            return Err(format!(
                "this access key's sessions hold {mine} staging bytes; {bytes} more would pass its {} byte budget",
                q.limits.memory_per_key
            ));
        }
        if u.memory.saturating_add(bytes) > q.limits.memory {
            return Err(format!(
                "the server's staging memory ({} of {} bytes) has no room for {bytes} more",
                u.memory, q.limits.memory
            ));
        }
        u.memory += bytes;
        if let Some(k) = u.keys.get_mut(&self.key) {
            k.1 += bytes;
        }
        self.memory += bytes;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut u = lock(&self.quotas.usage);
        u.sessions = u.sessions.saturating_sub(1);
        u.memory = u.memory.saturating_sub(self.memory);
        let empty = match u.keys.get_mut(&self.key) {
            Some(k) => {
                k.0 = k.0.saturating_sub(1);
                k.1 = k.1.saturating_sub(self.memory);
                k.0 == 0
            }
            None => false,
        };
        if empty {
            u.keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas() -> Arc<Quotas> {
        Quotas::new(Limits {
            sessions: 4,
            sessions_per_key: 2,
            memory: 100,
            memory_per_key: 60,
        })
    }

    #[test]
    fn one_key_cannot_take_every_session_or_the_memory() {
        let q = quotas();
        let a1 = q.session("a").expect("a's first");
        let mut a2 = q.session("a").expect("a's second");
        assert!(q.session("a").is_err(), "a third session for one key");
        let mut b1 = q.session("b").expect("another key still has room");
        a2.memory(60).expect("a's budget");
        assert!(b1.memory(41).is_err(), "past the server's budget");
        b1.memory(40).expect("what is left");
        let mut c1 = q.session("c").expect("c");
        assert!(c1.memory(1).is_err(), "the server's budget is spent");
        assert!(q.session("d").is_err(), "every session is in use");
        assert_eq!(q.usage(), (4, 100));
        drop((a1, a2, b1, c1));
        assert_eq!(q.usage(), (0, 0));
        assert!(lock(&q.usage).keys.is_empty());
        let mut a = q.session("a").expect("all given back");
        a.memory(60).expect("all given back");
    }
}
