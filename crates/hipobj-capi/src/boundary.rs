//! The panic boundary: no panic unwinds into C.
//!
//! Every exported function runs its body through one of these. A panic
//! becomes `hipObjInternalError` (or the function's fallback value), after
//! the default hook has printed it to stderr.

use std::panic::{AssertUnwindSafe, catch_unwind};

use hipobj::ErrorKind;

use crate::types::HipObjError;

/// Runs `body`, turning a panic into `hipObjInternalError`.
pub(crate) fn guard(body: impl FnOnce() -> HipObjError) -> HipObjError {
    // The library's state stays consistent across a panic: locks recover from
    // poisoning, and no invariant spans a call into a seam.
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(HipObjError::code(ErrorKind::InternalError))
}

/// Runs `body`, turning a panic into `fallback`.
pub(crate) fn guard_or<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}
