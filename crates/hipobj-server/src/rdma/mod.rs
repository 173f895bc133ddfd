//! The RDMA side of the server (docs/protocol.md §4).
//!
//! [`RdmaS3`] wraps any store (any [`s3s::S3`]) and intercepts GetObject,
//! PutObject and UploadPart requests that carry `x-amz-rdma-token`: it binds
//! the client's QP (`409`), moves the bytes with the [`Rdma`] engine, and
//! answers with the reply header and no body. Everything else passes
//! through to the store untouched.

mod bridge;
mod layer;

use std::sync::Arc;

use hipobj_peer::{PeerError, RdmaPeer};
use hipobj_platform::{NicTopology, Verbs};
use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::{S3Error, S3ErrorCode};
use tokio::sync::Semaphore;

pub use layer::RdmaS3;

use crate::config::RdmaConfig;

/// How the server opens its RDMA device: a verbs implementation and the
/// NIC topology to select from.
#[derive(Clone)]
pub struct VerbsProvider {
    /// The verbs implementation (libibverbs, or a soft NIC).
    pub verbs: Arc<dyn Verbs>,
    /// Where NICs sit, for selection.
    pub topology: Arc<dyn NicTopology>,
}

impl std::fmt::Debug for VerbsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsProvider").finish_non_exhaustive()
    }
}

impl VerbsProvider {
    /// libibverbs (loaded at run time; `HIPOBJ_IBVERBS_LIBRARY` names
    /// another) and the system's sysfs topology, as `hipobj-system` builds
    /// them.
    pub fn ibverbs() -> Result<Self, crate::Error> {
        let verbs = hipobj_system::ibverbs().map_err(|e| crate::Error::Rdma(e.to_string()))?;
        Ok(Self {
            verbs,
            topology: hipobj_system::topology(),
        })
    }

    /// The soft RoCE NIC (`softroce0`, configured by the `HIPOBJ_SOFTROCE_*`
    /// environment variables; see docs/soft-roce.md), with no topology.
    pub fn softroce() -> Result<Self, crate::Error> {
        let verbs = hipobj_system::softroce().map_err(|e| crate::Error::Rdma(e.to_string()))?;
        Ok(Self {
            verbs,
            topology: Arc::new(hipobj_platform::NoTopology),
        })
    }
}

/// The open device, its bindings, and the limit on transfers at once.
#[derive(Debug)]
pub struct Rdma {
    peer: Arc<RdmaPeer>,
    slots: Arc<Semaphore>,
}

impl Rdma {
    /// Opens the device `config` names through `provider`.
    pub fn open(provider: &VerbsProvider, config: &RdmaConfig) -> Result<Self, crate::Error> {
        let peer = RdmaPeer::open(
            provider.verbs.as_ref(),
            provider.topology.as_ref(),
            config.device.as_deref(),
            config.peer_config(),
        )
        .map_err(|e| crate::Error::Rdma(e.to_string()))?;
        tracing::info!("RDMA device open: {}", peer.selection());
        Ok(Self {
            peer: Arc::new(peer),
            slots: Arc::new(Semaphore::new(config.max_concurrent.max(1))),
        })
    }

    /// The peer (for its counters and bindings).
    pub fn peer(&self) -> &Arc<RdmaPeer> {
        &self.peer
    }
}

/// The reply header (docs/protocol.md §2).
pub const REPLY: &str = hipobj_proto::REPLY_HEADER;
/// The token header (docs/protocol.md §1).
pub const TOKEN: &str = hipobj_proto::TOKEN_HEADER;
/// The byte count of a successful transfer.
pub const BYTES: &str = hipobj_proto::BYTES_HEADER;

/// An S3 error with our own code and status.
fn error(code: &'static str, status: StatusCode, msg: impl Into<String>) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), msg.into());
    e.set_status_code(status);
    e
}

/// An S3 error that also carries an `x-amz-rdma-reply` header.
fn with_reply(mut e: S3Error, reply: &str) -> S3Error {
    let mut h = HeaderMap::new();
    // s3s replaces the whole header map of an error response with this one.
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if let Ok(v) = HeaderValue::from_str(reply) {
        h.insert(REPLY, v);
    }
    e.set_headers(h);
    e
}

/// `501`: RDMA declined; the client falls back to plain HTTP.
fn decline(why: &str) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::NotImplemented, why.to_owned());
    e.set_status_code(StatusCode::NOT_IMPLEMENTED);
    with_reply(e, "501")
}

/// A token the server cannot use.
fn invalid_token(why: impl Into<String>) -> S3Error {
    error("InvalidRDMAToken", StatusCode::BAD_REQUEST, why)
}

/// The S3 error for a peer failure.
fn peer_error(e: PeerError) -> S3Error {
    match e {
        PeerError::InvalidToken(m) => invalid_token(m),
        PeerError::BufferTooSmall { have, want } => error(
            "RDMABufferTooSmall",
            StatusCode::BAD_REQUEST,
            format!("the token's buffer holds {have} bytes, the object or range is {want}: nothing was sent"),
        ),
        PeerError::Busy(n) => {
            let mut e = S3Error::with_message(
                S3ErrorCode::SlowDown,
                format!("all {n} RDMA bindings are in use; retry later"),
            );
            e.set_status_code(StatusCode::SERVICE_UNAVAILABLE);
            e
        }
        PeerError::Verbs(v) => error(
            "RDMATransferFailed",
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("RDMA setup failed: {v}"),
        ),
        PeerError::Transfer(m) => error("RDMATransferFailed", StatusCode::INTERNAL_SERVER_ERROR, m),
        PeerError::Io(io) => error(
            "RDMATransferFailed",
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the object could not be read or stored: {io}"),
        ),
    }
}
