//! How the store's own failures are answered.

use s3s::{S3Error, S3ErrorCode};

/// A failure of the store's own: logged with `what` and the cause (which
/// may name files of the data directory), answered with neither. A cause
/// that is a full file system or an exhausted quota (`ENOSPC`, `EDQUOT`) is
/// [`insufficient_storage`], which a client can act on; anything else is
/// `500 InternalError`.
pub(super) fn internal<E: std::fmt::Display + 'static>(what: &str, e: E) -> S3Error {
    let io = (&e as &dyn std::any::Any).downcast_ref::<std::io::Error>();
    if io.is_some_and(is_out_of_space) {
        tracing::warn!("fs store: {what}: {e}");
        return insufficient_storage();
    }
    tracing::error!("fs store: {what}: {e}");
    S3Error::with_message(
        S3ErrorCode::InternalError,
        "The server met an internal error; its log has the details.",
    )
}

/// Whether `e` says the data directory's file system is full, or its
/// owner's quota spent.
pub fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// `507 InsufficientStorage`: the answer to a write that found no room.
/// S3 itself never runs out of space; the S3-compatible stores that can
/// (MinIO's `XMinioStorageFull`, versitygw's `InsufficientStorage`) answer
/// 507, which clients do not retry as they retry a 500 or a 503. Nothing of
/// the write is kept: it was going to a temporary file, which is removed.
pub fn insufficient_storage() -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("InsufficientStorage".into()),
        "The server has no room left to store this data; free some space and try again.",
    );
    e.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
    e
}

pub(super) fn io_kind(e: &std::io::Error) -> std::io::ErrorKind {
    e.kind()
}
