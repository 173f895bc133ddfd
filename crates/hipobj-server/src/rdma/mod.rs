//! The RDMA side of the server (docs/protocol.md §4).
//!
//! [`RdmaLayer`] wraps any store (any [`s3s::S3`]) and intercepts GetObject,
//! PutObject and UploadPart requests that carry `x-amz-rdma-token`: it hands
//! each to the target ([`hipobj_target::Target::serve`], which binds, moves
//! and replies) with the store as the bytes' source or sink, and maps the
//! answer to an S3 response with the reply header and no body. Everything
//! else passes through to the store untouched.

mod bridge;
mod ceph_rules;
mod checksum;
mod layer;
pub mod rc_v2;
mod same_bucket;
pub mod sigv4;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use hipobj_platform::{NicTopology, Verbs};
use hipobj_target::{LocalAddresses, Target, TargetError};
use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::{S3Error, S3ErrorCode};

pub use ceph_rules::RdmaRules;
pub use layer::RdmaLayer;

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

/// The open device and its bindings.
#[derive(Debug)]
pub struct Rdma {
    target: Arc<Target>,
    /// The rules token requests are held to, and the limit they name.
    rules: RdmaRules,
    max_transfer: u64,
}

/// This host's addresses, for clients that connect over loopback: an
/// address is local when a UDP socket can bind to it.
#[derive(Debug)]
struct HostAddresses;

impl LocalAddresses for HostAddresses {
    fn is_local(&self, ip: Ipv4Addr) -> bool {
        ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
    }
}

impl Rdma {
    /// Opens the device `config` names through `provider`.
    pub fn open(provider: &VerbsProvider, config: &RdmaConfig) -> Result<Self, crate::Error> {
        let target = Target::open(
            provider.verbs.as_ref(),
            provider.topology.as_ref(),
            config.device.as_deref(),
            config.target_config(),
        )
        .map_err(|e| crate::Error::Rdma(e.to_string()))?
        .with_local_addresses(Arc::new(HostAddresses));
        tracing::info!(
            vendor = target.vendor().name(),
            "RDMA device open: {}",
            target.selection()
        );
        Ok(Self {
            target: Arc::new(target),
            rules: config.rules,
            max_transfer: config.max_transfer,
        })
    }

    /// The target (for its counters and bindings).
    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }
}

/// The address an HTTP request came from (a request extension the
/// listener sets, which the RDMA layer checks token GIDs against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

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

/// An S3 error that also carries an `x-amz-rdma-reply` header (and, like
/// every RDMA response, `Cache-Control: no-store`).
fn with_reply(mut e: S3Error, reply: &str) -> S3Error {
    let mut h = HeaderMap::new();
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
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

/// The S3 error for a target failure.
fn target_error(e: TargetError<S3Error>) -> S3Error {
    match e {
        TargetError::Declined => decline("this server serves RC tokens only; use plain HTTP"),
        TargetError::InvalidToken(m) => invalid_token(m),
        TargetError::NotTheCallers(m) => error("AccessDenied", StatusCode::FORBIDDEN, m),
        TargetError::BufferTooSmall { have, want } => error(
            "RDMABufferTooSmall",
            StatusCode::BAD_REQUEST,
            format!("the token's buffer holds {have} bytes, the object or range is {want}: nothing was sent"),
        ),
        TargetError::Busy(n) => {
            let mut e = S3Error::with_message(
                S3ErrorCode::SlowDown,
                format!("all {n} RDMA bindings are in use; retry later"),
            );
            e.set_status_code(StatusCode::SERVICE_UNAVAILABLE);
            e
        }
        TargetError::StagingBusy(n) => {
            let mut e = S3Error::with_message(
                S3ErrorCode::SlowDown,
                format!("all {n} GET staging buffers are in use; retry later"),
            );
            e.set_status_code(StatusCode::SERVICE_UNAVAILABLE);
            e
        }
        TargetError::Verbs(v) => error(
            "RDMATransferFailed",
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("RDMA setup failed: {v}"),
        ),
        TargetError::Transfer(m) => error("RDMATransferFailed", StatusCode::INTERNAL_SERVER_ERROR, m),
        TargetError::Store(e) => e,
    }
}
