//! Small conversions the store's files share: hex, times, ETag text.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3s::dto::{ETag, Timestamp};

pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

pub(super) fn strip_quotes(s: &str) -> &str {
    s.trim_start_matches("W/").trim_matches('"')
}

pub(super) fn etag_of(e: &ETag) -> &str {
    match e {
        ETag::Strong(s) | ETag::Weak(s) => s,
    }
}

pub(super) fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
