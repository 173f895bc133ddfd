//! The C types of hipobj.h, laid out as the header declares them.

use std::ffi::{c_char, c_int, c_void};

use hipobj::{Error, ErrorKind};

/// `hipObjOpError_t`: a C enum, passed as an `int`. Received values are
/// kept as integers, since a C caller can pass any.
pub type OpError = c_int;

/// `hipObjSuccess`.
pub const SUCCESS: OpError = 0;

/// `HIPOBJ_BASE_ERR`: the base of hipObject's error number range, kept
/// from the spec's header for source compatibility. The library returns
/// `hipObjOpError_t` codes (0 to 12), never a number from this range.
pub const BASE_ERR: c_int = 6000;

/// `hipObjError_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_snake_case)]
pub struct HipObjError {
    /// The operation error.
    pub opError: OpError,
    /// The GPU runtime's error behind it, or 0.
    pub hipError: c_int,
}

impl HipObjError {
    /// Success.
    pub const OK: Self = Self {
        opError: SUCCESS,
        hipError: 0,
    };

    /// A code with no GPU error.
    pub const fn code(kind: ErrorKind) -> Self {
        Self {
            opError: kind.code() as OpError,
            hipError: 0,
        }
    }
}

impl From<&Error> for HipObjError {
    fn from(e: &Error) -> Self {
        Self {
            opError: e.kind().code() as OpError,
            hipError: e.gpu_error(),
        }
    }
}

impl From<Result<(), Error>> for HipObjError {
    fn from(r: Result<(), Error>) -> Self {
        match r {
            Ok(()) => Self::OK,
            Err(e) => Self::from(&e),
        }
    }
}

/// `hipObjOps_t::sendRequest`.
pub type SendRequestFn =
    unsafe extern "C" fn(ctx: *mut c_void, token: *const c_char, token_len: usize) -> c_int;
/// `hipObjOps_t::recvReply`.
pub type RecvReplyFn =
    unsafe extern "C" fn(ctx: *mut c_void, reply: *mut c_char, reply_len: *mut usize) -> c_int;

/// `hipObjOps_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_snake_case)]
pub struct HipObjOps {
    /// Sends the S3 request carrying the token.
    pub sendRequest: Option<SendRequestFn>,
    /// Receives the `x-amz-rdma-reply` value.
    pub recvReply: Option<RecvReplyFn>,
}

/// `hipObjConfig_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_snake_case)]
pub struct HipObjConfig {
    /// Not used.
    pub endpoint: *const c_char,
    /// Not used.
    pub region: *const c_char,
    /// Not used.
    pub accessKey: *const c_char,
    /// Not used.
    pub secretKey: *const c_char,
    /// Reserved, 0.
    pub flags: u32,
    /// GPU index, or -1.
    pub gpuDevice: c_int,
    /// Comma-separated RDMA device names, or NULL.
    pub nicHint: *const c_char,
}

/// `hipObjRcV2Session_t`: opaque to C. A handle's address is a key into
/// the library's table of live sessions, never read through.
#[repr(C)]
#[derive(Debug)]
pub struct HipObjRcV2Session {
    _opaque: [u8; 0],
}
