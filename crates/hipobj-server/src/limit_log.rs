//! A warning when a limit acts (docs/server.md, "Limits"), at most one line
//! per limit every [`EVERY`].
//!
//! A limit acting is news an operator needs: a client behind a NAT that
//! outgrew its connection share, bodies cut for their rate. But a stranger
//! can make a limit act thousands of times a second, and the log must not
//! become theirs. So each limit writes its first time at once and then at
//! most one line per window, saying how many times it acted since its
//! last line; `hipobj_limits_hit_total{limit}` counts every time.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The shortest time between two lines of one limit.
pub(crate) const EVERY: Duration = Duration::from_secs(10);

/// The last line of each limit.
#[derive(Debug, Default)]
pub struct LimitLog {
    limits: Mutex<HashMap<&'static str, Window>>,
}

#[derive(Debug)]
struct Window {
    logged_at: Instant,
    /// Times the limit acted since `logged_at`, unlogged.
    since: u64,
}

impl LimitLog {
    /// `limit` acted (`what`: on whom, and how); logs it unless this limit
    /// logged within [`EVERY`]. Whether a line was written.
    pub fn acted(&self, limit: &'static str, what: impl FnOnce() -> String) -> bool {
        let now = Instant::now();
        let times = {
            let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
            match limits.get_mut(limit) {
                Some(w) if now.duration_since(w.logged_at) < EVERY => {
                    w.since += 1;
                    return false;
                }
                Some(w) => {
                    let times = w.since + 1;
                    *w = Window {
                        logged_at: now,
                        since: 0,
                    };
                    times
                }
                None => {
                    limits.insert(
                        limit,
                        Window {
                            logged_at: now,
                            since: 0,
                        },
                    );
                    1
                }
            }
        };
        tracing::warn!(
            limit,
            times,
            "a limit acted: {} ({times} times since the last line of this limit)",
            what()
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_logs_once_per_window() {
        let log = LimitLog::default();
        assert!(log.acted("a", || "first".into()));
        for _ in 0..1000 {
            assert!(!log.acted("a", unreachable_message));
        }
        // Another limit has its own window.
        assert!(log.acted("b", || "other".into()));
        // A window gone by: the next one logs, with the count.
        if let Ok(mut l) = log.limits.lock()
            && let Some(w) = l.get_mut("a")
            && let Some(past) = Instant::now().checked_sub(EVERY + Duration::from_secs(1))
        {
            w.logged_at = past;
        }
        assert!(log.acted("a", || "again".into()));
        let since = log
            .limits
            .lock()
            .map(|l| l.get("a").map(|w| w.since))
            .ok()
            .flatten();
        assert_eq!(since, Some(0));
    }

    fn unreachable_message() -> String {
        panic!("a suppressed line built its message")
    }
}
