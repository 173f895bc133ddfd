//! Retries of the requests that carry a token (docs/protocol.md, "Retries
//! of requests that carry a token").
//!
//! The SDK's own retries stay off for these requests: a retried request
//! would carry the same token, and pair one reply with another request's
//! exchange. Instead a whole transfer is run again, as a new hipObject call
//! with a new token (a fresh window key, on whatever connection the pool
//! gives), and only when the server cannot have moved a byte of it:
//!
//! - the last request never reached the server (the connection was refused,
//!   the name did not resolve, the TCP connect failed or timed out): an
//!   earlier request of the same call was at most a binding round, which
//!   moves nothing;
//! - the server answered `503 SlowDown`, S3's "reduce your request rate",
//!   which it sends before doing any work (hipobj-server: every binding in
//!   use), and no `x-amz-rdma-reply` success came with it.
//!
//! Nothing else is retried: no `4xx` (the request's own fault: another try
//! gets the same answer), no other `5xx` and no connection that broke after
//! the request went out (the server may have read or written the bytes),
//! and no failure of the RDMA itself. The pause before try `n + 1` (from 0)
//! is half of `min(cap, base * 2^n)` plus a random part of up to the other
//! half ("equal jitter"), so clients that failed together spread out.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::capture::Exchange;

/// How a client retries a transfer whose request carried a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRetries {
    /// Tries in all, the first included; 1 turns retries off.
    pub attempts: u32,
    /// The pause before the first retry is between half of this and this.
    pub base: Duration,
    /// No pause is longer than this.
    pub cap: Duration,
}

impl Default for TokenRetries {
    fn default() -> Self {
        Self {
            attempts: 4,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(5),
        }
    }
}

impl TokenRetries {
    /// The pause before retry `n` (0: the first retry).
    pub fn pause(&self, n: u32) -> Duration {
        let full = self
            .base
            .checked_mul(1u32.checked_shl(n).unwrap_or(u32::MAX))
            .unwrap_or(self.cap)
            .min(self.cap);
        let half = full / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = if nanos == 0 { 0 } else { random() % (nanos + 1) };
        half + Duration::from_nanos(jitter)
    }
}

/// A random number: SipHash under the process's random keys over a counter
/// and the process id.
fn random() -> u64 {
    static STATE: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = STATE
        .get_or_init(std::collections::hash_map::RandomState::new)
        .build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// Why the transfer whose last exchange was `last` may be run again, or
/// `None` when it may not (see the module's rules).
pub(crate) fn retry_reason(last: Option<&Exchange>) -> Option<String> {
    let last = last?;
    match last.status {
        None => last
            .failure
            .as_ref()
            .filter(|e| e.never_sent())
            .map(|e| format!("the request never reached the server ({e})")),
        Some(503) => {
            let slow_down = last.failure.as_ref().and_then(|e| e.s3_code()) == Some("SlowDown");
            let done = last
                .reply
                .as_deref()
                .and_then(|r| hipobj_proto::parse_reply(r.as_bytes()).ok())
                .is_some_and(|r| r.is_success());
            (slow_down && !done).then(|| "the server answered 503 SlowDown".to_owned())
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_with_jitter_and_stop_at_the_cap() {
        let r = TokenRetries {
            attempts: 8,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
        };
        for n in 0..8 {
            let full = Duration::from_millis(100 << n).min(Duration::from_millis(1000));
            for _ in 0..50 {
                let p = r.pause(n);
                assert!(p >= full / 2 && p <= full, "retry {n}: {p:?}");
            }
        }
        let spread: std::collections::HashSet<Duration> = (0..50).map(|_| r.pause(3)).collect();
        assert!(spread.len() > 10, "no jitter: {spread:?}");
        assert!(r.pause(40) <= Duration::from_millis(1000));
    }
}
