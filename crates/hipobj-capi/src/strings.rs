//! The strings the C API returns: error descriptions and the version.

use std::ffi::{CStr, c_int};

/// The version as the crate (and so the header, which a test checks) has it.
pub(crate) const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("the package version holds a NUL byte"),
    };
/// Returned by `hipObjGetVersionString` if it fails.
pub(crate) const FALLBACK_VERSION: &CStr = c"0.0.0";
/// Returned by `hipObjGetErrorString` if it fails.
pub(crate) const FALLBACK_ERROR: &CStr = c"Unknown error";

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "version part is not a number");
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

/// Major version.
pub(crate) const VERSION_MAJOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MAJOR"));
/// Minor version.
pub(crate) const VERSION_MINOR: u32 = parse_u32(env!("CARGO_PKG_VERSION_MINOR"));
/// Patch version.
pub(crate) const VERSION_PATCH: u32 = parse_u32(env!("CARGO_PKG_VERSION_PATCH"));

const ERRORS: [&CStr; 13] = [
    c"Success: the call did what was asked.",
    c"Invalid value: an argument is NULL, out of range, of the wrong kind, or otherwise not acceptable.",
    c"Not initialized: call hipObjInit() first, or again after hipObjShutdown().",
    c"Already initialized: hipObjInit() has already succeeded; call hipObjShutdown() before initializing again.",
    c"RDMA error: the RDMA library, NIC, connection or transfer failed.",
    c"S3 error: a callback failed, or the server's x-amz-rdma-reply is missing, malformed or not a success.",
    c"Buffer not registered: no buffer is registered at that address.",
    c"Buffer already registered: the buffer, or part of it, is already registered.",
    c"NIC not found: no RDMA NIC could be chosen or opened.",
    c"dma-buf not supported: the NIC cannot reach the GPU memory directly.",
    c"Size too large: a size or count is over hipObject's limit (4 GiB a buffer or transfer, 256 buffers).",
    c"Internal error: something failed inside hipObject, or a staging copy timed out.",
    c"Busy: the buffer or an RDMA connection is in use (a call in progress, a staging copy still running, or a callback's transfer found every connection taken); try again later.",
];

/// The sentence for an error code; unknown codes get a sentence of their own.
pub(crate) fn error_string(code: c_int) -> &'static CStr {
    usize::try_from(code)
        .ok()
        .and_then(|i| ERRORS.get(i))
        .copied()
        .unwrap_or(c"Unknown hipObject error code.")
}
