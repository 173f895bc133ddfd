//! The library's error type.
//!
//! [`ErrorKind`] is the spec's `hipObjOpError_t` without `hipObjSuccess`; the
//! C ABI maps it one to one. [`Error`] adds the GPU runtime's own error number
//! (reported as `hipObjError_t::hipError`) and a sentence for people.

use std::fmt;

use hipobj_platform::{GpuError, VerbsError, VerbsErrorKind};

/// What kind of failure, as the C API reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorKind {
    /// An argument is NULL, out of range, or otherwise unacceptable.
    InvalidValue = 1,
    /// The library is not initialized.
    NotInitialized = 2,
    /// The library is already initialized.
    AlreadyInitialized = 3,
    /// An RDMA device, connection or transfer failed.
    RdmaError = 4,
    /// The S3 exchange failed: a callback failed, or the server's reply is not a success.
    S3Error = 5,
    /// The buffer is not registered.
    BufNotRegistered = 6,
    /// The buffer, or part of it, is already registered.
    BufAlreadyRegistered = 7,
    /// No RDMA NIC can be used.
    NicNotFound = 8,
    /// dma-buf registration is not supported.
    DmabufNotSupported = 9,
    /// A size is over a limit.
    SizeTooLarge = 10,
    /// Something failed inside the library.
    InternalError = 11,
    /// The buffer or a connection is in use.
    Busy = 12,
}

impl ErrorKind {
    /// The `hipObjOpError_t` value.
    pub const fn code(self) -> u32 {
        self as u32
    }
}

/// A failure, with the GPU runtime's error number where one is behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    gpu_error: i32,
    detail: String,
}

impl Error {
    /// A failure of `kind`, described by `detail`.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            gpu_error: 0,
            detail: detail.into(),
        }
    }

    /// The same failure, also carrying the GPU runtime's error number.
    #[must_use]
    pub fn with_gpu_error(mut self, code: i32) -> Self {
        self.gpu_error = code;
        self
    }

    /// The kind, as the C API reports it.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The GPU runtime's error number, or 0.
    pub fn gpu_error(&self) -> i32 {
        self.gpu_error
    }

    /// The sentence for people.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    pub(crate) fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidValue, detail)
    }

    pub(crate) fn busy(detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Busy, detail)
    }

    pub(crate) fn rdma(context: &str, err: &VerbsError) -> Self {
        let kind = match err.kind {
            VerbsErrorKind::Unsupported if err.op == "ibv_reg_dmabuf_mr" => ErrorKind::DmabufNotSupported,
            _ => ErrorKind::RdmaError,
        };
        Self::new(kind, format!("{context}: {err}"))
    }

    pub(crate) fn gpu(kind: ErrorKind, context: &str, err: &GpuError) -> Self {
        Self::new(kind, format!("{context}: {err}")).with_gpu_error(err.code)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)?;
        if self.gpu_error != 0 {
            write!(f, " (GPU runtime error {})", self.gpu_error)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
